package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
)

// scrapeHere reads the metrics at addr, dialled from this thread (so in
// its namespace), as name (with labels) to value.
func scrapeHere(addr string) (map[string]float64, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	data, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	_, body, _ := bytes.Cut(data, []byte("\r\n\r\n"))
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, nil
}

// within polls cond every 50 ms until it holds or d (scaled) has passed.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(testenv.Scaled(d))
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBackendRun: 'backend run' attaches the backend program and serves
// its counters (second-chance packets received among them); it takes GUE
// for an address added under it, and stops for one removed; it attaches
// again when the attachment is removed underneath; SIGTERM stops it and
// leaves the program attached.
func TestBackendRun(t *testing.T) {
	backendRig(t, func(b []string) error {
		dir := b[2]
		lo, _ := netlink.LinkByName("lo")
		netlink.LinkSetUp(lo)
		if err := addAddr(lo, "10.10.10.10/32"); err != nil {
			return err
		}
		bk0, _ := netlink.LinkByName("bk0")
		if err := addAddr(bk0, "10.77.0.2/24"); err != nil {
			return err
		}
		const metrics = "127.0.0.1:19465"
		var log bytes.Buffer
		cmd := asDirector(os.Args[0], append(b, "run", "--attach", "bk0", "--mode", "generic", "--metrics", metrics, "--interval", "200ms")...)
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		defer func() {
			cmd.Process.Kill()
			<-done
		}()
		fail := func(format string, args ...any) error {
			return fmt.Errorf(format+"\nbackend run's log:\n%s", append(args, log.String())...)
		}
		var m map[string]float64
		scrape := func() bool {
			var err error
			m, err = scrapeHere(metrics)
			return err == nil
		}
		if !within(5*time.Second, func() bool {
			return scrape() && m[`director_backend_host_attached{interface="bk0",mode="generic"}`] == 1
		}) {
			return fail("no metrics saying it is attached: %v", m)
		}
		// GUE another backend sent on (next hop index 1), to this host.
		sock, err := testrun.Listen("bk1")
		if err != nil {
			return err
		}
		defer sock.Close()
		inner := pkt.IPv4(netip.MustParseAddr("198.51.100.9"), netip.MustParseAddr("10.10.10.10"), 6, pkt.TCP(4000, 80, 0x10, nil), pkt.V4Opts{})
		gueTo := func(dst string) []byte {
			h := gue.Header{Src: netip.MustParseAddr("10.77.0.12"), Hops: []netip.Addr{netip.MustParseAddr(dst), netip.MustParseAddr("10.77.0.13")},
				SourcePort: 0x8123, NextHop: 1, Proto: gue.ProtoIPv4}
			return append(h.Append(pkt.Eth(pkt.DirectorMAC, pkt.GatewayMAC, 0, 0x0800, nil), len(inner)), inner...)
		}
		for i := 0; i < 5; i++ {
			if err := sock.Send(gueTo("10.77.0.2")); err != nil {
				return err
			}
		}
		if !within(5*time.Second, func() bool { return scrape() && m["director_backend_host_second_chance_received_total"] >= 5 }) {
			return fail("second chance received: %v", m)
		}
		if m[`director_backend_host_packets_total{result="decap_last_hop"}`] < 5 {
			return fail("the packets' result: %v", m)
		}
		doc, err := os.ReadFile("../../docs/metrics.md")
		if err != nil {
			return err
		}
		families := 0
		for k := range m {
			name, _, _ := strings.Cut(k, "{")
			if strings.HasPrefix(name, "director_") {
				families++
				if !strings.Contains(string(doc), "`"+name+"`") {
					return fmt.Errorf("%s is served but not in docs/metrics.md", name)
				}
			}
		}
		if families < 8 {
			return fail("%d director_ metrics served: %v", families, m)
		}
		// An address added under it, then removed.
		bp, err := loader.OpenBackend(dir)
		if err != nil {
			return err
		}
		defer bp.Close()
		added := netip.MustParseAddr("10.60.0.9")
		accepts := func() bool {
			as, err := bp.Accepted()
			return err == nil && slices.Contains(as, netip.PrefixFrom(added, 32))
		}
		before := m["director_backend_host_accepted_addresses"]
		if err := addAddr(lo, added.String()+"/32"); err != nil {
			return err
		}
		if !within(5*time.Second, func() bool { return accepts() && scrape() && m["director_backend_host_accepted_addresses"] == before+1 }) {
			return fail("%s, added, is not taken: %v", added, m)
		}
		// Taken means decapsulated here. (pass_not_gue is no witness: the
		// link's own IPv6 neighbour traffic is passed too, at any time.)
		decapped := m[`director_backend_host_packets_total{result="decap_last_hop"}`]
		sock.Send(gueTo(added.String()))
		if !within(5*time.Second, func() bool {
			return scrape() && m[`director_backend_host_packets_total{result="decap_last_hop"}`] == decapped+1
		}) || m[`director_backend_host_packets_total{result="drop_not_local"}`] != 0 {
			return fail("GUE for %s, added, was not taken: %v", added, m)
		}
		a, _ := netlink.ParseAddr(added.String() + "/32")
		if err := netlink.AddrDel(lo, a); err != nil {
			return err
		}
		if !within(5*time.Second, func() bool { return !accepts() && scrape() && m["director_backend_host_accepted_addresses"] == before }) {
			return fail("%s, removed, is still taken: %v", added, m)
		}
		// Issue 46, item 5: a VIP range held as a prefix on lo, added
		// under the service, is taken whole.
		rng := netip.MustParsePrefix("10.86.0.0/24")
		if err := addAddr(lo, rng.String()); err != nil {
			return err
		}
		if !within(5*time.Second, func() bool {
			as, err := bp.Accepted()
			return err == nil && slices.Contains(as, rng) && scrape() && m["director_backend_host_accepted_addresses"] == before+1
		}) {
			return fail("%s, added on lo, is not taken: %v", rng, m)
		}
		decapped = m[`director_backend_host_packets_total{result="decap_last_hop"}`]
		sock.Send(gueTo("10.86.0.5"))
		if !within(5*time.Second, func() bool {
			return scrape() && m[`director_backend_host_packets_total{result="decap_last_hop"}`] == decapped+1
		}) || m[`director_backend_host_packets_total{result="drop_not_local"}`] != 0 {
			return fail("GUE for 10.86.0.5 in %s on lo was not taken: %v", rng, m)
		}
		// And a prefix made local by a route alone, no address.
		_, rt, _ := net.ParseCIDR("10.87.0.0/24")
		if err := netlink.RouteAdd(&netlink.Route{Dst: rt, LinkIndex: lo.Attrs().Index, Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL,
			Scope: netlink.SCOPE_HOST}); err != nil {
			return err
		}
		if !within(5*time.Second, func() bool {
			as, err := bp.Accepted()
			return err == nil && slices.Contains(as, netip.MustParsePrefix("10.87.0.0/24"))
		}) {
			return fail("10.87.0.0/24, a local route on lo, is not taken: %v", m)
		}
		// 'backend detach' is refused while the service owns the pins
		// (TestOneOwnerPerPinDirectory); the attachment removed underneath,
		// by a process that asks no lock, as a hostile host would.
		if _, errOut, code := runCmd(append(b, "detach", "bk0")...); code != 1 || !strings.Contains(errOut, "'director backend run'") {
			return fmt.Errorf("backend detach under 'backend run': exit %d: %s", code, errOut)
		}
		if err := bp.Detach("bk0"); err != nil {
			return fmt.Errorf("detach underneath: %w", err)
		}
		if !within(5*time.Second, func() bool {
			atts, err := bp.Attachments()
			return err == nil && len(atts) == 1 && atts[0].State == "attached" && scrape() && m["director_backend_host_reattaches_total"] == 1
		}) {
			return fail("not attached again: %v", m)
		}
		if !strings.Contains(log.String(), "the attachment was lost; attached again") || !strings.Contains(log.String(), "addresses changed") {
			return fail("the log does not say what it did")
		}
		// SIGTERM: it ends, the program stays attached.
		logged := log.Len()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			done <- err
			if err != nil {
				return fail("on SIGTERM: %v", err)
			}
		case <-time.After(testenv.Scaled(5 * time.Second)):
			return fail("still running after SIGTERM")
		}
		if atts, err := bp.Attachments(); err != nil || len(atts) != 1 || atts[0].State != "attached" {
			return fmt.Errorf("after SIGTERM: %v %+v", err, atts)
		}
		// Issue 47, item 8: a clean stop warns of nothing (the netlink
		// subscriptions ending with the service are not a problem).
		if w := warnings(log.String()[logged:]); len(w) > 0 {
			return fail("a clean SIGTERM logged warnings: %q", w)
		}
		return nil
	})
}

// warnings are a text log's WARN and ERROR lines.
func warnings(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return out
}
