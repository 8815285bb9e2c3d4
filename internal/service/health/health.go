// Package health checks backends as GLB's glb-healthcheck does, and turns
// results into health: an HTTP GET, a TCP connect, and a GUE probe (an ICMP
// echo request encapsulated in GUE to the backend's GUE port, which the
// backend's decapsulating program hands to its stack, and whose echo reply
// comes back: the probe crosses the tunnel path steered traffic takes).
// A Dampener changes a backend's state only after several equal results;
// a Scheduler runs checks every interval, with jittered start times and
// bounded concurrency.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// Kinds of check, as GLB's healthchecks block names them.
const (
	HTTP = "http"
	TCP  = "tcp"
	GUE  = "gue"
)

// Checks are one backend's checks: a port each, 0 where there is none.
type Checks struct {
	HTTP, TCP, GUE int
	HTTPURI        string // "/" by default
}

// ChecksOf reads a backend's healthchecks block. GLB's "fou" check is not
// run: FOU is GLB's old encapsulation, and the director sends GUE.
func ChecksOf(h *table.Healthchecks) Checks {
	var c Checks
	if h == nil {
		return c
	}
	if h.HTTP != nil {
		c.HTTP = *h.HTTP
	}
	if h.TCP != nil {
		c.TCP = *h.TCP
	}
	if h.GUE != nil {
		c.GUE = *h.GUE
	}
	c.HTTPURI = "/"
	if h.HTTPURI != nil && *h.HTTPURI != "" {
		c.HTTPURI = *h.HTTPURI
	}
	return c
}

// Kinds lists the checks c has, in a fixed order.
func (c Checks) Kinds() []string {
	var k []string
	if c.HTTP != 0 {
		k = append(k, HTTP)
	}
	if c.TCP != 0 {
		k = append(k, TCP)
	}
	if c.GUE != 0 {
		k = append(k, GUE)
	}
	return k
}

// Result is one check's outcome.
type Result struct {
	Kind    string
	OK      bool
	Latency time.Duration
	Reason  string // why it failed: timeout, refused, status 503, no reply...
	// Local is set when the check could not be made because the director
	// lacked a resource (descriptors, buffers, memory, local ports): the
	// result says nothing of the backend, and must never take it down.
	Local bool
}

// Local reports whether any of rs could not be made for want of the
// director's own resources.
func Local(rs []Result) bool {
	for _, r := range rs {
		if r.Local {
			return true
		}
	}
	return false
}

// localFault reports whether err is the director's own want of a resource
// rather than anything the backend did.
func localFault(err error) (syscall.Errno, bool) {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return e, true
		}
	}
	return 0, false
}

// Prober runs checks. It is safe for concurrent use.
type Prober struct {
	Timeout time.Duration
	// Sources are the director's addresses: the inner sources of GUE
	// probes, where their echo replies come back to.
	Sources Sources
	client  *http.Client

	mu        sync.Mutex
	gue, gue6 *pinger // made at the first probe of their family
}

// Sources are the director's addresses GUE probes come from: its
// outbound_src_ip for IPv4 backends, its outbound_src_ip6 for IPv6 ones.
// Either may be missing; a probe that needs it then fails as the
// director's fault (Result.Local).
type Sources struct{ V4, V6 netip.Addr }

// of is the source for probes to ip, and the error for its absence.
func (s Sources) of(ip netip.Addr) (netip.Addr, error) {
	if ip.Is4() {
		return s.V4, ErrNoSource
	}
	return s.V6, ErrNoSource6
}

// NewProber returns a Prober whose checks give up after timeout.
func NewProber(timeout time.Duration, sources Sources) *Prober {
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil,
		DialContext: (&net.Dialer{Timeout: timeout}).DialContext, ResponseHeaderTimeout: timeout}
	return &Prober{Timeout: timeout, Sources: sources, client: &http.Client{Transport: tr, Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Close releases the GUE probers' sockets.
func (p *Prober) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, g := range []*pinger{p.gue, p.gue6} {
		if g != nil {
			errs = append(errs, g.close())
		}
	}
	return errors.Join(errs...)
}

// Probe runs every check of c against ip, concurrently, and returns their
// results in Kinds order. A backend is healthy when all of them pass.
func (p *Prober) Probe(ctx context.Context, ip netip.Addr, c Checks) []Result {
	kinds := c.Kinds()
	out := make([]Result, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, p.Timeout)
			defer cancel()
			start := time.Now()
			var err error
			switch k {
			case HTTP:
				err = p.http(ctx, ip, c.HTTP, c.HTTPURI)
			case TCP:
				err = p.tcp(ctx, ip, c.TCP)
			case GUE:
				err = p.gueProbe(ctx, ip, c.GUE)
			}
			out[i] = Result{Kind: k, OK: err == nil, Latency: time.Since(start)}
			if err != nil {
				out[i].Reason = reason(err)
				if e, ok := localFault(err); ok {
					out[i].Local, out[i].Reason = true, "director: "+e.Error()
				} else if errors.Is(err, ErrNoSource) || errors.Is(err, ErrNoSource6) || errors.Is(err, ErrNoRaw) {
					out[i].Local, out[i].Reason = true, "director: "+err.Error()
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// Healthy reports whether every result passed.
func Healthy(rs []Result) bool {
	for _, r := range rs {
		if !r.OK {
			return false
		}
	}
	return true
}

// http GETs uri from ip:port. The URL is built from its parts, the host
// from ip and port alone: nothing in uri can aim the check elsewhere (the
// config refuses such a uri, config.CheckHTTPURI; this is the second line).
func (p *Prober) http(ctx context.Context, ip netip.Addr, port int, uri string) error {
	if err := config.CheckHTTPURI(uri); err != nil {
		return fmt.Errorf("http_uri %q: %w", uri, err)
	}
	path, err := url.ParseRequestURI(uri)
	if err != nil {
		return fmt.Errorf("http_uri %q: %w", uri, err)
	}
	host := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	u := &url.URL{Scheme: "http", Host: host, Path: path.Path, RawPath: path.RawPath, RawQuery: path.RawQuery}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if req.URL.Host != host {
		return fmt.Errorf("http_uri %q: the request would go to %s, not %s", uri, req.URL.Host, host)
	}
	req.Header.Set("User-Agent", "director-healthcheck")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusError(resp.StatusCode)
	}
	return nil
}

type statusError int

func (s statusError) Error() string { return "status " + strconv.Itoa(int(s)) }

func (p *Prober) tcp(ctx context.Context, ip netip.Addr, port int) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return c.Close()
}

// errNoReply is a GUE probe's failure: no echo reply came back.
var errNoReply = errors.New("no reply")

func (p *Prober) gueProbe(ctx context.Context, ip netip.Addr, port int) error {
	src, missing := p.Sources.of(ip)
	if !src.IsValid() {
		return missing
	}
	p.mu.Lock()
	slot := &p.gue
	if ip.Is6() {
		slot = &p.gue6
	}
	if *slot == nil {
		g, err := newPinger(src)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		*slot = g
	}
	g := *slot
	p.mu.Unlock()
	return g.ping(ctx, ip, port)
}

// reason names a check's failure for metrics and logs: a short, stable
// word rather than the error's text.
func reason(err error) string {
	var se statusError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		return se.Error()
	case errors.Is(err, errNoReply):
		return "no reply"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return "not permitted"
	}
	// Something else: say what, in few words, rather than a bare
	// "error": the system's word for it, where there is one.
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "error: " + errno.Error()
	}
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80] + "..."
	}
	return "error: " + msg
}

// describe is a result for a log line.
func (r Result) String() string {
	if r.OK {
		return fmt.Sprintf("%s ok in %s", r.Kind, r.Latency.Round(time.Microsecond))
	}
	return fmt.Sprintf("%s failed: %s", r.Kind, r.Reason)
}

// Once checks every backend of c whose health is left to the checks (no
// "healthy"; inactive ones are not checked) once, at most limit at a
// time, each address and set of checks once however many tables hold it.
// It returns the results by table and backend: nil for backends it did not
// check.
func Once(ctx context.Context, p *Prober, c *table.Config, limit int) [][][]Result {
	out := make([][][]Result, len(c.Tables))
	type key struct {
		ip netip.Addr
		c  Checks
	}
	results := map[key][]Result{}
	var order []key
	for i := range c.Tables {
		out[i] = make([][]Result, len(c.Tables[i].Backends))
		for _, b := range c.Tables[i].Backends {
			k := key{b.IP, ChecksOf(b.Healthchecks)}
			if _, ok := results[k]; ok || !b.Checked || b.State == table.StateInactive {
				continue
			}
			results[k] = nil
			order = append(order, k)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(limit, 1))
	for _, k := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rs := p.Probe(ctx, k.ip, k.c)
			mu.Lock()
			results[k] = rs
			mu.Unlock()
		}()
	}
	wg.Wait()
	for i := range c.Tables {
		for j, b := range c.Tables[i].Backends {
			if b.Checked && b.State != table.StateInactive {
				out[i][j] = results[key{b.IP, ChecksOf(b.Healthchecks)}]
			}
		}
	}
	return out
}

// CanProbe says why c's checks cannot be made from this process with
// sources as the director's addresses, or nil: what 'director healthcheck'
// refuses up front rather than mark every backend down.
func CanProbe(c *table.Config, sources Sources) error {
	var fams []netip.Addr // one backend of each family with a gue check
	for i := range c.Tables {
		for _, b := range c.Tables[i].Backends {
			if !b.Checked || b.State == table.StateInactive || ChecksOf(b.Healthchecks).GUE == 0 {
				continue
			}
			if len(fams) == 0 || len(fams) == 1 && fams[0].Is4() != b.IP.Is4() {
				fams = append(fams, b.IP)
			}
		}
	}
	for _, ip := range fams {
		src, missing := sources.of(ip)
		if !src.IsValid() {
			return fmt.Errorf("the gue checks of %v cannot be made: %w", ip, missing)
		}
		g, err := newPinger(src)
		if err != nil {
			return fmt.Errorf("the gue checks cannot be made: %w", err)
		}
		g.close()
	}
	return nil
}
