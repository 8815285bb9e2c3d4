// Package backendrun is 'director backend run': the backend program set
// up on one interface and kept so, following the host's addresses and the
// interface, with its counters as Prometheus metrics.
package backendrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/daemon"
	"github.com/director/director/loader"
)

// Options configure 'director backend run'.
type Options struct {
	BPFFS       string
	Setup       loader.BackendSetup
	MetricsAddr string        // ADDR:PORT for /metrics; "" for none
	Interval    time.Duration // how often the attachment and addresses are checked besides netlink's events; 5s by default
	Log         *slog.Logger
	// Ready is called once the program is attached; systemd's READY=1 by
	// default.
	Ready func(status string)
}

// Run sets the backend program up (as 'backend attach' does) and
// keeps it so until ctx ends: it takes GUE for the host's addresses as
// they are added and removed, and attaches the program again when its
// attachment is lost (the interface deleted and made again, the link
// removed underneath), on netlink's events and every Interval. It serves
// the program's counters as Prometheus metrics. When it stops the program
// stays attached: decapsulation goes on without the service.
func Run(ctx context.Context, o Options) (err error) {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Ready == nil {
		o.Ready = func(s string) { daemon.Notify("READY=1\nSTATUS=" + s) }
	}
	// What can fail without the kernel fails first: a start refused for a
	// bad --metrics leaves nothing loaded or attached.
	var ln net.Listener
	if o.MetricsAddr != "" {
		if ln, err = net.Listen("tcp", o.MetricsAddr); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		defer ln.Close()
	}
	// A start that fails after that leaves no pins it made (daemon.UndoFreshPins).
	started := false
	undo := daemon.UndoFreshPins(o.BPFFS, o.Log)
	defer func() { undo(err != nil && !started) }()
	// One service per pin directory, as for 'director run': the lock is the
	// pins' own, and every command that changes them checks it.
	unlock, err := loader.LockRun(o.BPFFS)
	if err != nil {
		return err
	}
	defer unlock()
	b, err := loader.LoadBackend(o.BPFFS)
	if err != nil {
		return err
	}
	defer b.Close()
	for _, r := range b.Repaired {
		o.Log.Warn("repaired the pins", "what", r)
	}
	r := &backendRun{o: o, b: b, log: o.Log}
	a, selves, err := b.Setup(o.Setup)
	if err != nil {
		return fmt.Errorf("setting the backend program up on %s: %w", o.Setup.Iface, err)
	}
	started = true
	accepted, _ := b.Accepted()
	r.mode, r.attached = a.Mode, true
	o.Log.Info("running", "interface", a.Interface, "mode", a.Mode, "forwards from", addrList(selves), "accepts GUE for", addrList(accepted),
		"trusts", trustList(o.Setup.Trust), "second chance", o.Setup.Forwards())
	if ln != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(r, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelError)}))
		srv := daemon.ServeHTTP(ln, mux, o.Log)
		defer srv.Close()
	}
	events := r.subscribe(ctx)
	o.Ready(fmt.Sprintf("attached to %s", a.Interface))
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			daemon.Notify("STOPPING=1")
			o.Log.Info("stopped; the backend program stays attached, decapsulating")
			return nil
		case <-events:
			// A burst of events (an interface made again brings several)
			// is one look.
			time.Sleep(50 * time.Millisecond)
			drain(events)
		case <-tick.C:
		}
		r.sync()
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// trustList says whom a backend trusts, for its log.
func trustList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "nobody listed (--trust): GUE taken from any source, never sent on"
	}
	return addrList(ps)
}

func addrList[T fmt.Stringer](as []T) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// backendRun is a running backend service's state, and its metrics
// (a prometheus.Collector reading the program's counters at each scrape).
type backendRun struct {
	o    Options
	b    *loader.BackendProgram
	log  *slog.Logger
	mode string

	mu         sync.Mutex
	attached   bool
	accepted   int
	reattaches uint64
	addrMoves  uint64
}

// subscribe returns a channel that gets a value on each address, route or
// link event of this namespace (routes: 'ip route add local PREFIX dev lo'
// makes a prefix local with no address event) (closed subscriptions end with ctx).
func (r *backendRun) subscribe(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	poke := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	addrs := make(chan netlink.AddrUpdate, 64)
	links := make(chan netlink.LinkUpdate, 64)
	routes := make(chan netlink.RouteUpdate, 64)
	onErr := func(err error) {
		// Each subscription's socket fails as it is closed when ctx ends:
		// that is the service stopping, not a lost event.
		if ctx.Err() == nil {
			r.log.Warn("netlink subscription", "err", err)
		}
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, ctx.Done(), netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		r.log.Warn("no address events; looking every interval only", "err", err)
	}
	if err := netlink.LinkSubscribeWithOptions(links, ctx.Done(), netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		r.log.Warn("no link events; looking every interval only", "err", err)
	}
	if err := netlink.RouteSubscribeWithOptions(routes, ctx.Done(), netlink.RouteSubscribeOptions{ErrorCallback: onErr}); err != nil {
		r.log.Warn("no route events; looking every interval only", "err", err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-routes:
				if !ok {
					routes = nil
				} else if u.Route.Type != unix.RTN_LOCAL {
					continue // only local routes change what is accepted
				}
				poke()
			case _, ok := <-addrs:
				if !ok {
					addrs = nil
				}
				poke()
			case _, ok := <-links:
				if !ok {
					links = nil
				}
				poke()
			}
		}
	}()
	return out
}

// sync follows the host's addresses and puts the attachment back.
func (r *backendRun) sync() {
	added, removed, err := r.b.FollowAddrs()
	switch {
	case err != nil:
		r.log.Error("following the host's addresses", "err", err)
	case len(added)+len(removed) > 0:
		r.log.Info("addresses changed", "now accepts GUE for", addrList(added), "no longer for", addrList(removed))
		r.mu.Lock()
		r.addrMoves += uint64(len(added) + len(removed))
		r.mu.Unlock()
	}
	iface := r.o.Setup.Iface
	atts, err := r.b.Attachments()
	if err != nil {
		r.log.Error("reading the attachments", "err", err)
		return
	}
	for _, a := range atts {
		if a.Interface == iface && a.State == "attached" {
			r.setAttached(true)
			return
		}
	}
	r.setAttached(false)
	if _, err := net.InterfaceByName(iface); err != nil {
		r.log.Warn("the interface is gone; waiting for it", "interface", iface)
		return
	}
	// Detach whatever is left of the old attachment, then attach as
	// at the start.
	if err := r.b.Detach(iface); err != nil && !errors.Is(err, loader.ErrNotAttached) {
		r.log.Warn("removing the lost attachment", "interface", iface, "err", err)
	}
	a, _, err := r.b.Setup(r.o.Setup)
	if err != nil {
		r.log.Error("attaching again", "interface", iface, "err", err)
		return
	}
	r.mu.Lock()
	r.reattaches++
	r.mode = a.Mode
	r.mu.Unlock()
	r.setAttached(true)
	r.log.Warn("the attachment was lost; attached again", "interface", iface, "mode", a.Mode)
}

func (r *backendRun) setAttached(on bool) {
	r.mu.Lock()
	r.attached = on
	r.mu.Unlock()
}

// The backend host's metrics (docs/metrics.md, "Backend hosts").
var (
	beProcessedDesc = prometheus.NewDesc("director_backend_host_processed_total", "Packets the backend program saw.", nil, nil)
	bePacketsDesc   = prometheus.NewDesc("director_backend_host_packets_total",
		"Packets the backend program decided on, by result: decapsulated (decap_syn, decap_known, decap_not_tcp, decap_last_hop), sent on (forwarded, forwarded_stack), passed (pass_not_gue) or dropped (drop_*).",
		[]string{"result"}, nil)
	beGUE6Desc         = prometheus.NewDesc("director_backend_host_gue6_total", "GUE packets for this host over IPv6.", nil, nil)
	beSecondChanceDesc = prometheus.NewDesc("director_backend_host_second_chance_received_total",
		"GUE packets for this host that another backend sent on (second chance): a drained backend's old connections still arriving.", nil, nil)
	beAttachedDesc = prometheus.NewDesc("director_backend_host_attached", "1 while the program is attached to the interface, 0 while not.", []string{"interface", "mode"}, nil)
	beAcceptedDesc = prometheus.NewDesc("director_backend_host_accepted_addresses", "Addresses and prefixes the program takes GUE for (this host's local routes).", nil, nil)
	beReattachDesc = prometheus.NewDesc("director_backend_host_reattaches_total", "Times the service found the attachment lost and attached again.", nil, nil)
	beAddrDesc     = prometheus.NewDesc("director_backend_host_address_changes_total", "Addresses and prefixes added to or removed from those the program takes GUE for, after the start.", nil, nil)
)

// Describe implements prometheus.Collector.
func (r *backendRun) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{beProcessedDesc, bePacketsDesc, beGUE6Desc, beSecondChanceDesc, beAttachedDesc, beAcceptedDesc, beReattachDesc, beAddrDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the program's counters as they
// are now.
func (r *backendRun) Collect(ch chan<- prometheus.Metric) {
	c, err := r.b.Counters()
	if err != nil {
		r.log.Error("reading the backend program's counters", "err", err)
		ch <- prometheus.NewInvalidMetric(bePacketsDesc, err)
	} else {
		for _, name := range loader.BackendCounterNames() {
			v := float64(c[name])
			switch name {
			case "processed":
				ch <- prometheus.MustNewConstMetric(beProcessedDesc, prometheus.CounterValue, v)
			case "gue6":
				ch <- prometheus.MustNewConstMetric(beGUE6Desc, prometheus.CounterValue, v)
			case "second_chance_in":
				ch <- prometheus.MustNewConstMetric(beSecondChanceDesc, prometheus.CounterValue, v)
			default:
				ch <- prometheus.MustNewConstMetric(bePacketsDesc, prometheus.CounterValue, v, name)
			}
		}
	}
	accepted, err := r.b.Accepted()
	if err == nil {
		ch <- prometheus.MustNewConstMetric(beAcceptedDesc, prometheus.GaugeValue, float64(len(accepted)))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	up := 0.0
	if r.attached {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(beAttachedDesc, prometheus.GaugeValue, up, r.o.Setup.Iface, r.mode)
	ch <- prometheus.MustNewConstMetric(beReattachDesc, prometheus.CounterValue, float64(r.reattaches))
	ch <- prometheus.MustNewConstMetric(beAddrDesc, prometheus.CounterValue, float64(r.addrMoves))
}
