package loader

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
	"github.com/director/director/table/bindmap"
)

// sweepBinds are nested prefixes of several lengths, overlapping port
// ranges, single ports and ranges on one address, in both families: each
// table is named for what it binds, and has its own backend.
var sweepBinds = []struct{ name, binds string }{
	{"exact", `{"ip": "10.40.1.1", "proto": "tcp", "port": 80}, {"ip": "10.40.1.1", "proto": "udp", "port": 53}`},
	{"range", `{"ip": "10.40.1.1", "proto": "tcp", "port_start": 8000, "port_end": 9000}, {"ip": "fd00:40::1", "proto": "tcp", "port_start": 1, "port_end": 1024}`},
	{"wide", `{"ip": "10.40.1.2", "proto": "tcp", "port_start": 1, "port_end": 65535}, {"ip": "10.40.1.1", "proto": "tcp", "port": 22}`},
	{"p24", `{"ip": "10.40.1.0/24", "proto": "tcp", "port_start": 80, "port_end": 8080}, {"ip": "10.40.1.0/24", "proto": "udp", "port": 53}`},
	{"p16", `{"ip": "10.40.0.0/16", "proto": "tcp", "port": 443}, {"ip": "10.40.0.0/16", "proto": "udp", "port_start": 1, "port_end": 65535}`},
	// Shorter than /16: it covers many of the /16s the program indexes
	// IPv4's prefix lengths by.
	{"p12", `{"ip": "10.32.0.0/12", "proto": "tcp", "port": 25}, {"ip": "10.32.0.0/12", "proto": "udp", "port_start": 5000, "port_end": 5100}`},
	{"p64", `{"ip": "fd00:40::/64", "proto": "tcp", "port_start": 1000, "port_end": 2000}, {"ip": "fd00:40::/48", "proto": "udp", "port": 53}`},
}

// smallBinds are nested prefixes and ranges small enough for the exact
// table to hold spelled out (ExactPoints), in both families, and a prefix
// too large for it, written with a host address, which it holds.
var smallBinds = []struct{ name, binds string }{
	{"exact", `{"ip": "10.60.1.1", "proto": "tcp", "port": 80}, {"ip": "10.60.2.7", "proto": "tcp", "port": 80}`},
	{"range", `{"ip": "10.60.1.1", "proto": "tcp", "port_start": 8000, "port_end": 9000}, {"ip": "fd00:60::1", "proto": "tcp", "port_start": 443, "port_end": 450}`},
	{"p24", `{"ip": "10.60.2.0/24", "proto": "tcp", "port": 80}, {"ip": "10.60.2.0/24", "proto": "udp", "port_start": 1000, "port_end": 1003}`},
	{"p25", `{"ip": "10.60.2.128/25", "proto": "tcp", "port_start": 80, "port_end": 81}, {"ip": "10.60.3.0/28", "proto": "udp", "port_start": 53, "port_end": 60}`},
	{"p124", `{"ip": "fd00:60::/124", "proto": "tcp", "port": 443}, {"ip": "fd00:60::/124", "proto": "udp", "port": 53}`},
	// Too large whole: only the address it is written with goes in.
	{"written", `{"ip": "10.60.4.9/24", "proto": "tcp", "port_start": 2000, "port_end": 3000}`},
}

var sweepSample = flag.Int("sweep.sample", 0, "TestBindSweep: sweep only this many random ports per address and protocol, besides "+
	"every bind's edges (0: all 65,536); the guest kernels of 'make test-kernels' run a sample, being emulated")

// sweepPorts are the destination ports the sweep sends to: all of them,
// or with -sweep.sample the first and last, each bind's edges and the
// ports beside them, and a sample of the rest, the same at every run.
func sweepPorts(refs []table.BindRef) []int {
	if *sweepSample <= 0 {
		ports := make([]int, 65536)
		for i := range ports {
			ports[i] = i
		}
		return ports
	}
	set := map[int]bool{0: true, 65535: true}
	for _, r := range refs {
		for _, p := range []int{int(r.Bind.PortStart) - 1, int(r.Bind.PortStart), int(r.Bind.PortEnd), int(r.Bind.PortEnd) + 1} {
			if p >= 0 && p < 65536 {
				set[p] = true
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(*sweepSample), 7))
	for range *sweepSample {
		set[rng.IntN(65536)] = true
	}
	ports := make([]int, 0, len(set))
	for p := range set {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	return ports
}

// sweepConfig is a config of sweepBinds, plus extra tables' binds.
func sweepConfig(extra ...string) string { return sweepConfigOf(sweepBinds, extra...) }

// sweepConfigOf is a config of a table for each of binds, plus extra
// tables' binds.
func sweepConfigOf(binds []struct{ name, binds string }, extra ...string) string {
	var ts []string
	add := func(i int, name, binds string) {
		ts = append(ts, fmt.Sprintf(`{"name": %q, "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
		  "binds": [%s], "backends": [{"ip": "192.168.%d.1", "state": "active", "healthy": true}]}`, name, binds, 100+i))
	}
	for i, b := range binds {
		add(i, b.name, b.binds)
	}
	for i, b := range extra {
		add(len(binds)+i, fmt.Sprintf("extra%d", i), b)
	}
	return `{"tables": [` + strings.Join(ts, ",\n") + `]}`
}

// TestBindSweep sends a packet to every port of every bound address, and
// of addresses inside and beside the prefixes, over TCP and UDP, through
// the kernel, and checks each went to the table table.ResolveBind names (or
// was passed where it names none). Once with configs the group path
// holds, and once with more prefix lengths than it probes and a group with
// more ranges than it scans, which go to the trie.
func TestBindSweep(t *testing.T) {
	testenv.Kernel(t)
	many := []string{
		// Six IPv4 prefix lengths: more than the group path probes.
		`{"ip": "10.50.0.0/16", "proto": "tcp", "port": 80}, {"ip": "10.50.1.0/24", "proto": "tcp", "port": 81}, {"ip": "10.50.1.0/25", "proto": "tcp", "port": 82},
		 {"ip": "10.50.1.0/26", "proto": "tcp", "port": 83}, {"ip": "10.50.1.0/27", "proto": "tcp", "port": 84}, {"ip": "10.50.1.0/28", "proto": "tcp", "port": 85}`,
		// Ten ranges on one address: more than it scans.
		`{"ip": "fd00:50::1", "proto": "tcp", "port_start": 10, "port_end": 19}, {"ip": "fd00:50::1", "proto": "tcp", "port_start": 30, "port_end": 39},
		 {"ip": "fd00:50::1", "proto": "tcp", "port_start": 50, "port_end": 59}, {"ip": "fd00:50::1", "proto": "tcp", "port_start": 70, "port_end": 79},
		 {"ip": "fd00:50::1", "proto": "tcp", "port_start": 90, "port_end": 99}, {"ip": "fd00:50::1", "proto": "tcp", "port_start": 110, "port_end": 119},
		 {"ip": "fd00:50::1", "proto": "tcp", "port_start": 130, "port_end": 139}, {"ip": "fd00:50::1", "proto": "tcp", "port_start": 150, "port_end": 159},
		 {"ip": "fd00:50::1", "proto": "tcp", "port_start": 170, "port_end": 179}, {"ip": "fd00:50::1", "proto": "tcp", "port_start": 190, "port_end": 199}`,
	}
	// Ten addresses whose groups share a home: the table's probes hold
	// eight, so two groups are left to the trie, whose packets the full
	// probes send there.
	var full []string
	colliding := collidingGroups(int(bindmap.GroupProbes) + 2)
	for _, a := range colliding {
		full = append(full, a.String())
	}
	groupAddrs := []string{"10.40.1.1", "10.40.1.2", "10.40.1.77", "10.40.9.9", "10.41.0.1", "10.32.7.7", "10.47.255.1", "10.48.0.1", "fd00:40::1", "fd00:40::99", "fd00:40:0:1::1", "fd00:41::1"}
	// The first three leave the exact table to exact binds, so that the
	// group table and the trie answer the rest; the last is as a
	// director runs, prefix and range binds spelled out where they fit.
	for _, c := range []struct {
		name    string
		cfg     string
		addrs   []string
		trie    bool
		spelled bool
	}{
		{"group path", sweepConfig(), groupAddrs, false, false},
		{"full probes", sweepConfig(fullWindowBinds(colliding)), full, true, false},
		{"trie fallback", sweepConfig(many...), []string{"10.40.1.1", "10.40.1.77", "10.50.1.3", "10.50.1.40", "10.50.1.100", "10.50.2.1", "fd00:50::1", "fd00:40::99"}, true, false},
		{"spelled out", sweepConfigOf(smallBinds), []string{"10.60.1.1", "10.60.1.2", "10.60.2.1", "10.60.2.7", "10.60.2.130", "10.60.2.255", "10.60.3.5", "10.60.3.16", "10.60.4.9", "fd00:60::1", "fd00:60::5", "fd00:60::10"}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sweep(t, c.cfg, c.addrs, c.trie, c.spelled)
		})
	}
}

func sweep(t *testing.T, cfg string, addrs []string, trie, spelled bool) {
	tabs := testTables(t, cfg)
	dc := directorConfig()
	d, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.noSpelling = !spelled
	if err := d.Serve(&dc, tabs); err != nil {
		t.Fatal(err)
	}
	r, err := testrun.NewReplayer(d.Prog, d.Maps.Counters)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	refs := table.Refs(tabs)
	byBackend := map[netip.Addr]int{}
	for i, tb := range tabs {
		byBackend[tb.Backends[0].IP] = i
	}
	client := netip.MustParseAddr("198.51.100.7")
	client6 := netip.MustParseAddr("2001:db8::7")
	const batch = 4096
	frames := make([][]byte, 0, batch)
	type probe struct {
		dst   netip.Addr
		proto table.Proto
		port  uint16
	}
	probes := make([]probe, 0, batch)
	out := make([]testrun.Outcome, batch)
	checked, mismatches := 0, 0
	flush := func() {
		if err := r.Run(frames, out[:len(frames)]); err != nil {
			t.Fatal(err)
		}
		for i, p := range probes {
			want, ok := table.ResolveBind(refs, p.dst, p.proto, p.port, false)
			got, gotOK := -1, false
			if out[i].Verdict == 3 { // XDP_TX: the outer destination is the primary
				o := out[i].Out
				hop, _ := netip.AddrFromSlice(o[14+16 : 14+20])
				got, gotOK = byBackend[hop], true
			}
			if got != want && (ok || gotOK) || ok != gotOK {
				if mismatches < 10 {
					t.Errorf("%s %v port %d: kernel table %d (steered %v), ResolveBind %d (%v)", p.proto, p.dst, p.port, got, gotOK, want, ok)
				}
				mismatches++
			}
			checked++
		}
		frames, probes = frames[:0], probes[:0]
	}
	ports := sweepPorts(refs)
	for _, a := range addrs {
		dst := netip.MustParseAddr(a)
		for _, proto := range []table.Proto{6, 17} {
			for _, port := range ports {
				var l4 []byte
				if proto == 6 {
					l4 = pkt.TCP(40000, uint16(port), 0x10, nil)
				} else {
					l4 = pkt.UDP(40000, uint16(port), nil)
				}
				var ip []byte
				if dst.Is4() {
					ip = pkt.IPv4(client, dst, uint8(proto), l4, pkt.V4Opts{})
				} else {
					ip = pkt.IPv6(client6, dst, uint8(proto), l4)
				}
				frames = append(frames, pkt.Frame(ip))
				probes = append(probes, probe{dst, proto, uint16(port)})
				if len(frames) == batch {
					flush()
				}
			}
		}
	}
	if len(frames) > 0 {
		flush()
	}
	counters, err := d.GlobalCounters()
	if err != nil {
		t.Fatal(err)
	}
	names := CounterNames()
	get := func(n string) uint64 {
		for i, x := range names {
			if x == n {
				return counters[i]
			}
		}
		return 0
	}
	// The group path answers every matched packet the exact table does
	// not, unless the config is made to need the trie.
	matched, fast, group := get("matched"), get("bind_fast"), get("bind_group")
	if !trie && fast+group != matched {
		t.Errorf("matched %d, exact %d, group %d: some went to the trie", matched, fast, group)
	}
	if trie && fast+group == matched {
		t.Errorf("matched %d = exact %d + group %d: the trie fallback was not exercised", matched, fast, group)
	}
	// Spelled out, the exact table answers all; else only exact binds.
	if spelled && fast != matched {
		t.Errorf("matched %d, exact %d: not every bind was spelled out", matched, fast)
	}
	if !spelled && fast > matched/2 {
		t.Errorf("matched %d, exact %d: the group path was not exercised", matched, fast)
	}
	t.Logf("%d packets, %d mismatches; matched %d (exact %d, group %d)", checked, mismatches, matched, fast, group)
}

// collidingGroups returns n IPv4 addresses in 100.64.0.0/10 whose /32 TCP
// groups have the same home in the group table: more than its probes hold.
// (Their echo groups share a home too: the hash is linear in its words.)
func collidingGroups(n int) []netip.Addr {
	by := map[uint32][]netip.Addr{}
	for i := 0; i < 1<<22; i++ {
		a := netip.AddrFrom4([4]byte{100, 64 | byte(i>>16), byte(i >> 8), byte(i)})
		k := abi.GroupKey{Proto: 6, Plen: 32}
		k.Family, k.Addr = bindmap.PutAddr(a)
		h := bindmap.GroupHash(k) & (bindmap.GroupSlots - 1)
		by[h] = append(by[h], a)
		if len(by[h]) == n {
			return by[h]
		}
	}
	panic("no colliding groups")
}

// fullWindowBinds binds each colliding address to its own port, so that a
// packet answered from another's group would go unbound.
func fullWindowBinds(addrs []netip.Addr) string {
	var s string
	for i, a := range addrs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf(`{"ip": %q, "proto": "tcp", "port": %d}, {"ip": %q, "proto": "tcp", "port_start": %d, "port_end": %d}`,
			a, 1000+i, a, 2000+10*i, 2005+10*i)
	}
	return s
}
