package table

import (
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The verdict's rules, each with a case of its own (issue 50): a case
// makes one change, and its want is every reason the verdict gives, by
// kind, so that a rule disabled, or a boundary moved, fails the case that
// holds it and no other.

// reasonKinds name the verdict's reasons.
var reasonKinds = map[string]*regexp.Regexp{
	"at risk":       regexp.MustCompile(`^table \S+: \d+ rows at risk \(their connections break\)$`),
	"binds":         regexp.MustCompile(`^table \S+: binds removed: `),
	"hash_key":      regexp.MustCompile(`^table \S+: hash_key changed$`),
	"quic off":      regexp.MustCompile(`^table \S+: QUIC-LB routing turned off: `),
	"quic settings": regexp.MustCompile(`^table \S+: QUIC-LB settings changed \(`),
	"quic removed":  regexp.MustCompile(`^table \S+: QUIC config \d removed, and whether its IDs are still in use is not known`),
	"quic id":       regexp.MustCompile(`^table \S+: (backend \S+'s server ID changed|server ID \S+ moves)`),
	"no good":       regexp.MustCompile(`^table \S+: \d+ rows have no active healthy backend as primary$`),
	"moving":        regexp.MustCompile(`^table \S+: \d+ backends draining or filling at once \(GLB's safety rule allows one\)$`),
	"removed":       regexp.MustCompile(`^table \S+ is removed$`),
}

// kinds names each reason by its kind, in order; "?" for one of no kind.
func kinds(reasons []string) []string {
	var out []string
	for _, r := range reasons {
		k := "?" + r
		for name, re := range reasonKinds {
			if re.MatchString(r) {
				k = name
			}
		}
		out = append(out, k)
	}
	return out
}

const verdictBase = `{"tables": [{"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "34567890123456783456789012345678",
  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}, {"ip": "10.0.0.1", "proto": "tcp", "port": 443}],
  "backends": [{"ip": "10.1.0.1", "state": "active", "healthy": true},
    {"ip": "10.1.0.2", "state": "active", "healthy": true},
    {"ip": "10.1.0.3", "state": "active", "healthy": true},
    {"ip": "10.1.0.4", "state": "active", "healthy": true}]}]}`

func TestVerdictRules(t *testing.T) {
	t.Parallel()
	c, err := parseConfig([]byte(verdictBase))
	if err != nil {
		t.Fatal(err)
	}
	build := func(twoHops bool, edit func(tc *TableConfig)) []*Table {
		tc := c.Tables[0]
		tc.Backends = slices.Clone(tc.Backends)
		tc.Binds = slices.Clone(tc.Binds)
		tc.History.NoHops = twoHops
		if edit != nil {
			edit(&tc)
		}
		tb, err := Build(&tc)
		if err != nil {
			t.Fatal(err)
		}
		return []*Table{tb}
	}
	quic := func(tc *TableConfig) {
		tc.QUIC = QUIC{QUICConfig: QUICConfig{ConfigID: 1, ServerIDLen: 2, NonceLen: 6}}
		for i := range tc.Backends {
			tc.Backends[i].ServerID = ServerID([]byte{1, byte(i + 1)})
		}
	}
	for _, tc := range []struct {
		name    string
		twoHops bool // GLB's two hops (history_hops false), where a rule is only seen so
		old     func(*TableConfig)
		new     func(*TableConfig)
		want    []string // the reasons' kinds; none: safe
	}{
		{name: "no change"},
		{name: "hash_key, two hops", twoHops: true, new: func(tc *TableConfig) { tc.HashKey[0] ^= 1 }, want: []string{"at risk", "hash_key"}},
		{name: "hash_key, history in the packets", new: func(tc *TableConfig) { tc.HashKey[0] ^= 1 }},
		{name: "seed, two hops", twoHops: true, new: func(tc *TableConfig) { tc.Seed[0] ^= 1 }, want: []string{"at risk"}},
		{name: "seed, history in the packets", new: func(tc *TableConfig) { tc.Seed[0] ^= 1 }},
		{name: "an active backend removed, two hops", twoHops: true, new: func(tc *TableConfig) { tc.Backends = tc.Backends[1:] }, want: []string{"at risk"}},
		{name: "an active backend removed, history in the packets", new: func(tc *TableConfig) { tc.Backends = tc.Backends[1:] }},
		{name: "one drained, two hops", twoHops: true, new: func(tc *TableConfig) { tc.Backends[0].State = StateDraining }},
		{name: "two drained, two hops", twoHops: true, new: func(tc *TableConfig) { tc.Backends[0].State, tc.Backends[1].State = StateDraining, StateDraining },
			want: []string{"moving"}},
		{name: "two drained, history in the packets", new: func(tc *TableConfig) { tc.Backends[0].State, tc.Backends[1].State = StateDraining, StateDraining }},
		{name: "weight raised, two hops", twoHops: true, new: func(tc *TableConfig) { tc.Backends[1].Weight = 3 }},
		{name: "weight lowered, two hops", twoHops: true, old: func(tc *TableConfig) { tc.Backends[1].Weight = 3 },
			new: func(tc *TableConfig) { tc.Backends[1].Weight = 1 }, want: []string{"at risk"}},
		{name: "a bind added", new: func(tc *TableConfig) {
			tc.Binds = append(tc.Binds, Bind{Prefix: tc.Binds[0].Prefix, Proto: ProtoTCP, PortStart: 8080, PortEnd: 8080})
		}},
		{name: "a bind removed", new: func(tc *TableConfig) { tc.Binds = tc.Binds[:1] }, want: []string{"binds"}},
		{name: "every backend down", new: func(tc *TableConfig) {
			for i := range tc.Backends {
				tc.Backends[i].Healthy = false
			}
		}, want: []string{"no good"}},
		{name: "QUIC-LB turned on", new: quic},
		{name: "QUIC-LB turned off", old: quic, want: []string{"quic off"}},
		{name: "QUIC-LB settings changed", old: quic, new: func(tc *TableConfig) { quic(tc); tc.QUIC.NonceLen = 7 }, want: []string{"quic settings"}},
		// A config ID changed is a config removed (and one added): with
		// no counters to say it is idle, taken as in use.
		{name: "QUIC-LB config ID changed", old: quic, new: func(tc *TableConfig) { quic(tc); tc.QUIC.ConfigID = 2 }, want: []string{"quic removed"}},
		{name: "a QUIC server ID changed", old: quic, new: func(tc *TableConfig) {
			quic(tc)
			tc.Backends[2].ServerID = tc.Backends[3].ServerID
			tc.Backends[3].ServerID = ServerID([]byte{9, 9})
		}, want: []string{"quic id", "quic id", "quic id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, new := build(tc.twoHops, tc.old), build(tc.twoHops, tc.new)
			safe, reasons := Verdict(Compare(old, new))
			if got := kinds(reasons); safe != (len(tc.want) == 0) || !slices.Equal(got, tc.want) {
				t.Errorf("safe %v, reasons %q (kinds %v); want kinds %v", safe, reasons, got, tc.want)
			}
		})
	}
	t.Run("a table removed", func(t *testing.T) {
		api := build(false, nil)[0]
		web := build(false, func(tc *TableConfig) { tc.Name = "web" })[0]
		if safe, reasons := Verdict(Compare([]*Table{api, web}, []*Table{api})); safe || !slices.Equal(kinds(reasons), []string{"removed"}) {
			t.Errorf("safe %v, reasons %q", safe, reasons)
		}
	})
	// The boundaries, on the diff itself: one row is at risk, one has no
	// good backend, one backend moving is GLB's rule's allowance.
	t.Run("boundaries", func(t *testing.T) {
		for _, b := range []struct {
			name string
			td   TableDiff
			want []string
		}{
			{"0 rows at risk", TableDiff{Name: "api"}, nil},
			{"1 row at risk", TableDiff{Name: "api", Rows: RowChanges{AtRisk: 1}}, []string{"at risk"}},
			{"1 row at risk, hash_key changed", TableDiff{Name: "api", HashKeyChanged: true, Rows: RowChanges{AtRisk: 1}}, []string{"at risk", "hash_key"}},
			{"0 rows at risk, hash_key changed", TableDiff{Name: "api", HashKeyChanged: true}, nil},
			{"1 row with no good backend", TableDiff{Name: "api", Rows: RowChanges{NoGoodRows: 1}}, []string{"no good"}},
			{"1 backend draining", TableDiff{Name: "api", Backends: []BackendChange{moving(StateDraining)}}, nil},
			{"2 backends filling", TableDiff{Name: "api", Backends: []BackendChange{moving(StateFilling), moving(StateFilling)}}, []string{"moving"}},
			{"2 backends going inactive", TableDiff{Name: "api", Backends: []BackendChange{moving(StateInactive), moving(StateInactive)}}, nil},
			{"2 backends going active", TableDiff{Name: "api", Backends: []BackendChange{moving(StateActive), moving(StateActive)}}, nil},
		} {
			safe, reasons := Verdict(&Diff{Tables: []TableDiff{b.td}})
			if got := kinds(reasons); safe != (len(b.want) == 0) || !slices.Equal(got, b.want) {
				t.Errorf("%s: safe %v, reasons %q; want kinds %v", b.name, safe, reasons, b.want)
			}
		}
	})
}

func moving(state State) BackendChange {
	return BackendChange{New: &BackendSide{State: state.String()}}
}

// TestDirectorConfigRules: each director config setting changed alone,
// safe or not as docs/config.md says.
func TestDirectorConfigRules(t *testing.T) {
	t.Parallel()
	base := DirectorConfig{GatewayMAC: net.HardwareAddr{2, 0, 0, 0, 0, 3}, SrcIP: netip.MustParseAddr("192.0.2.1"),
		HashFields: HashSrcAddr, ForwardICMPEcho: true}
	for _, c := range []struct {
		name     string
		old, new func(*DirectorConfig)
		setting  string
		safe     bool
	}{
		{"source", nil, func(d *DirectorConfig) { d.SrcIP = netip.MustParseAddr("192.0.2.9") }, "outbound_src_ip", true},
		{"IPv6 source", nil, func(d *DirectorConfig) { d.SrcIP6 = netip.MustParseAddr("2001:db8::1") }, "outbound_src_ip6", true},
		{"MTU", nil, func(d *DirectorConfig) { d.OutboundMTU = 1400 }, "outbound_mtu", true},
		{"gateway", nil, func(d *DirectorConfig) { d.GatewayMAC = net.HardwareAddr{2, 0, 0, 0, 0, 4} }, "outbound_gateway_mac", false},
		{"IPv6 gateway", nil, func(d *DirectorConfig) { d.GatewayMAC6 = net.HardwareAddr{2, 0, 0, 0, 0, 6} }, "outbound_gateway_mac6", false},
		{"hash fields", nil, func(d *DirectorConfig) { d.HashFields = HashSrcAddr | HashSrcPort }, "hash_fields", false},
		{"hash fields, the old ones the alternate", nil, func(d *DirectorConfig) { d.HashFields, d.AltHashFields = HashSrcAddr|HashSrcPort, HashSrcAddr },
			"hash_fields", true},
		{"alternate added", nil, func(d *DirectorConfig) { d.AltHashFields = HashSrcPort }, "alt_hash_fields", true},
		{"alternate removed", func(d *DirectorConfig) { d.AltHashFields = HashSrcPort }, func(d *DirectorConfig) { d.AltHashFields = 0 }, "alt_hash_fields", true},
		{"alternate changed", func(d *DirectorConfig) { d.AltHashFields = HashSrcPort }, func(d *DirectorConfig) { d.AltHashFields = HashDstPort },
			"alt_hash_fields", false},
		{"ICMP echo", nil, func(d *DirectorConfig) { d.ForwardICMPEcho = false }, "forward_icmp_ping_responses", true},
	} {
		o, n := base, base
		if c.old != nil {
			c.old(&o)
			c.old(&n)
		}
		if c.new != nil {
			c.new(&n)
		}
		changes := CompareDirectorConfig(&o, &n)
		i := slices.IndexFunc(changes, func(s SettingChange) bool { return s.Setting == c.setting })
		if i < 0 || changes[i].Safe != c.safe {
			t.Errorf("%s: %+v; want %s safe %v", c.name, changes, c.setting, c.safe)
			continue
		}
		for _, s := range changes {
			if s.Setting != c.setting && !strings.Contains(s.Reason, "part of the hash_fields change") {
				t.Errorf("%s: %s changed too: %+v", c.name, s.Setting, s)
			}
		}
		p := &Plan{Safe: true}
		if err := p.JudgeDirector(&o, &n); err != nil {
			t.Fatal(err)
		}
		if p.Safe != c.safe || (len(p.Reasons) == 0) != c.safe {
			t.Errorf("%s: the plan's verdict safe %v, reasons %q; want safe %v", c.name, p.Safe, p.Reasons, c.safe)
		}
	}
}
