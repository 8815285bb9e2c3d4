package service

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// TestStatsdAsGLBTestsIt receives the statsd datagrams on a real UDP socket
// and reads them as GLB's test_director_metrics.py does (name:value|type|#tags,
// tags compared as a tuple, the engine's first), with the same expectations.
func TestStatsdAsGLBTestsIt(t *testing.T) {
	ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	names := loader.CounterNames()
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	var round atomic.Uint64
	counters := func() ([]uint64, error) {
		r := round.Add(1)
		c := make([]uint64, len(names))
		c[index["processed"]] = 100 * r
		c[index["matched"]] = 90 * r
		c[index["encapsulated"]] = 90 * r
		c[index["pass_no_bind"]] = 10 * r
		c[index["glb_no_matching_bind"]] = 10 * r
		return c, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sendStatsd(ctx, counters, ln.LocalAddr().(*net.UDPAddr).Port, 50*time.Millisecond)

	type key struct{ name, tags string }
	got := map[key]int{}
	buf := make([]byte, 4096)
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < 8 {
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			name, data, ok := strings.Cut(line, ":")
			info, tags, ok2 := strings.Cut(data, "#")
			parts := strings.SplitN(info, "|", 3)
			if !ok || !ok2 || len(parts) != 3 || parts[1] != "c" {
				t.Fatalf("not GLB's statsd line: %q", line)
			}
			v, err := strconv.Atoi(parts[0])
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			got[key{name, tags}] = v
		}
	}
	for k, want := range map[key]int{
		{"glb.director.packets.processed", "glb_engine:xdp"}:                     100,
		{"glb.director.packets.encapsulated", "glb_engine:xdp"}:                  90,
		{"glb.director.packets.results", "glb_engine:xdp,result:Matched"}:        90,
		{"glb.director.packets.results", "glb_engine:xdp,result:UnknownFormat"}:  0,
		{"glb.director.packets.results", "glb_engine:xdp,result:NoMatchingBind"}: 10,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%v: %d (sent %v), want %d a cycle", k, v, ok, want)
		}
	}
}

// TestStatsdResultsAreGLBs: frames of every kind a director's interface
// sees go through the program in the kernel, one at a time, and each moves
// the result GLB's XDP director gives it (glb_encap.c, packet_parsing.h):
// UnknownFormat only for what GLB's parser cannot read; NoMatchingBind for
// any IP packet it can whose destination, protocol and port are not bound
// (IPv6 neighbour discovery and MLD a fresh veth sends among them); Matched
// for what is bound, whether the director steers it or passes it (a first
// fragment, which GLB would steer).
func TestStatsdResultsAreGLBs(t *testing.T) {
	testenv.Kernel(t)
	c, err := config.Parse([]byte(`{"tables": [{"name": "vip", "hash_key": "` + testKey + `", "seed": "` + testSeed + `",
	  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}, {"ip": "10.10.10.10", "proto": "udp", "port": 53},
	            {"ip": "fd00::10", "proto": "tcp", "port": 443}],
	  "backends": [{"ip": "192.168.50.10", "state": "active", "healthy": true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	dc.GatewayMAC = net.HardwareAddr{2, 0, 0, 0, 0, 3}
	d, err := loader.Private(&dc, tabs)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var (
		client  = netip.MustParseAddr("198.51.100.7")
		client6 = netip.MustParseAddr("2001:db8::7")
		vip     = netip.MustParseAddr("10.10.10.10")
		vip6    = netip.MustParseAddr("fd00::10")
		other   = netip.MustParseAddr("10.10.10.11")
	)
	tcp := func(dst netip.Addr, port uint16, o pkt.V4Opts) []byte {
		return pkt.Frame(pkt.IPv4(client, dst, 6, pkt.TCP(40000, port, 0x10, []byte("hello")), o))
	}
	mac := [6]byte{2, 0, 0, 0, 0, 2}
	arp := make([]byte, 28)
	routerAlert := pkt.Ext{Type: 0, Body: []byte{5, 2, 0, 0}} // hop-by-hop: router alert, as MLD sends
	mld := pkt.IPv6(netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff02::16"), 58, pkt.ICMP(143, 0, 1, make([]byte, 20)), routerAlert)
	ns := pkt.IPv6(netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff02::1:ff00:2"), 58, pkt.ICMP(135, 0, 0, make([]byte, 16)))
	quoted := pkt.IPv4(vip, client, 6, pkt.TCP(80, 40000, 0x10, nil), pkt.V4Opts{})
	for _, f := range []struct {
		name   string
		frame  []byte
		result string // GLB's
	}{
		{"ARP", pkt.Eth(pkt.DirectorMAC, mac, 0, 0x0806, arp), "UnknownFormat"},
		{"LLDP", pkt.Eth([6]byte{0x01, 0x80, 0xc2, 0, 0, 0x0e}, mac, 0, 0x88cc, make([]byte, 40)), "UnknownFormat"},
		{"ARP in a VLAN", pkt.Eth(pkt.DirectorMAC, mac, 7, 0x0806, arp), "UnknownFormat"},
		{"IPv6 neighbour solicitation", pkt.Frame(ns), "NoMatchingBind"},
		{"MLD report behind a hop-by-hop header", pkt.Frame(mld), "NoMatchingBind"},
		{"TCP to the VIP", tcp(vip, 80, pkt.V4Opts{}), "Matched"},
		{"TCP to the IPv6 VIP", pkt.Frame(pkt.IPv6(client6, vip6, 6, pkt.TCP(40000, 443, 0x10, nil))), "Matched"},
		{"TCP to an unbound port", tcp(vip, 81, pkt.V4Opts{}), "NoMatchingBind"},
		{"UDP to another address", pkt.Frame(pkt.IPv4(client, other, 17, pkt.UDP(5000, 53, nil), pkt.V4Opts{})), "NoMatchingBind"},
		{"ICMP echo to the VIP", pkt.Frame(pkt.IPv4(client, vip, 1, pkt.ICMP(8, 0, 1, nil), pkt.V4Opts{})), "Matched"},
		{"ICMP echo elsewhere", pkt.Frame(pkt.IPv4(client, other, 1, pkt.ICMP(8, 0, 1, nil), pkt.V4Opts{})), "NoMatchingBind"},
		{"ICMP timestamp to the VIP", pkt.Frame(pkt.IPv4(client, vip, 1, pkt.ICMP(13, 0, 1, make([]byte, 12)), pkt.V4Opts{})), "Matched"},
		{"ICMP fragmentation needed for the VIP's flow", pkt.Frame(pkt.IPv4(client, vip, 1, pkt.ICMP(3, 4, 1400, quoted), pkt.V4Opts{})), "Matched"},
		{"a first fragment to the VIP", tcp(vip, 80, pkt.V4Opts{FragOff: 0x2000}), "Matched"},
		{"a later fragment to the VIP", pkt.Frame(pkt.IPv4(client, vip, 6, []byte{0, 1, 0, 2, 9, 9, 9, 9}, pkt.V4Opts{FragOff: 185})), "NoMatchingBind"},
		{"TCP to the VIP in a VLAN", pkt.Eth(pkt.DirectorMAC, mac, 7, 0x0800, pkt.IPv4(client, vip, 6, pkt.TCP(40000, 80, 0x10, nil), pkt.V4Opts{})), "Matched"},
		{"IPv4 cut to 30 bytes", tcp(vip, 80, pkt.V4Opts{})[:30], "UnknownFormat"},
		{"TCP to the VIP cut to its ports", tcp(vip, 80, pkt.V4Opts{})[:38], "Matched"},
		{"TCP to the VIP cut inside its ports", tcp(vip, 80, pkt.V4Opts{})[:36], "UnknownFormat"},
		{"IPv4 longer than its frame", tcp(vip, 80, pkt.V4Opts{TotalLen: 1400}), "Matched"},
		{"IPv6 cut to 50 bytes", pkt.Frame(pkt.IPv6(client6, vip6, 6, pkt.TCP(40000, 443, 0x10, nil)))[:50], "UnknownFormat"},
	} {
		before, err := d.GlobalCounters()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := testrun.Run(d.Prog, f.frame); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		after, err := d.GlobalCounters()
		if err != nil {
			t.Fatal(err)
		}
		prev, cur := map[string]uint64{}, map[string]uint64{}
		for i, n := range loader.CounterNames() {
			prev[n], cur[n] = before[i], after[i]
		}
		var got []string
		for _, l := range statsdLines(prev, cur) {
			if strings.Contains(l, "packets.results:1|") {
				got = append(got, l[strings.Index(l, "result:")+len("result:"):])
			}
		}
		if len(got) != 1 || got[0] != f.result {
			t.Errorf("%s: results %v, GLB's is %s", f.name, got, f.result)
		}
	}
}
