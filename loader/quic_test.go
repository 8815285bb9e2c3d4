package loader

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
	"github.com/director/director/table/quiclb/cidcipher"
)

// quicConfig is testConfig with QUIC-LB routing on three tables: web
// (three-byte server IDs, config 2; a draining backend keeps its
// packets), dns (fifteen-byte IDs, the longest; an unhealthy backend does
// not) and v6 (eight-byte IDs, config 0, a word exactly).
var quicConfig = func() string {
	r := strings.NewReplacer(
		`"binds": [{"ip": "10.20.0.1", "proto": "tcp", "port": 80}`,
		`"quic": {"config_id": 2, "server_id_len": 3, "nonce_len": 6}, "binds": [{"ip": "10.20.0.1", "proto": "tcp", "port": 80}`,
		`"binds": [{"ip": "10.30.0.0/16", "proto": "udp", "port": 53}`,
		`"quic": {"config_id": 5, "server_id_len": 15, "nonce_len": 4}, "binds": [{"ip": "10.30.0.0/16", "proto": "udp", "port": 53}`,
		`"binds": [{"ip": "fd00:30::/64"`,
		`"quic": {"config_id": 0, "server_id_len": 8, "nonce_len": 11}, "binds": [{"ip": "fd00:30::/64"`,
	)
	cfg := r.Replace(testConfig)
	// Each backend's server ID: its last address byte, repeated to the
	// table's length (distinct within each table).
	lens := map[string]int{"192.168.10.": 3, "192.168.20.": 15, "192.168.40.": 8}
	for prefix, l := range lens {
		for i := 1; i <= 6; i++ {
			ip := prefix + string(rune('0'+i)) + `"`
			cfg = strings.Replace(cfg, `"ip": "`+ip, `"server_id": "`+strings.Repeat(string([]byte{'a', byte('0' + i)}), l)+`", "ip": "`+ip, 1)
		}
	}
	return cfg
}()

// quicEncryptedConfig is quicConfig with encrypted connection IDs: web's
// and v6's server IDs lie in the left half of the four-pass construction
// (undone in three rounds), dns's do not (four), and v6's server ID and
// nonce are 16 bytes, one AES block (single pass).
var quicEncryptedConfig = strings.NewReplacer(
	`"server_id_len": 3, "nonce_len": 6}`, `"server_id_len": 3, "nonce_len": 6, "key": "8f95f09245765f80256934e50c66207f"}`,
	`"server_id_len": 15, "nonce_len": 4}`, `"server_id_len": 15, "nonce_len": 4, "key": "fdf726a9893ec05c0632d3956680baf0"}`,
	`"server_id_len": 8, "nonce_len": 11}`, `"server_id_len": 8, "nonce_len": 8, "key": "00112233445566778899aabbccddeeff"}`,
).Replace(quicConfig)

// quicRotationConfig is quicConfig with config rotation: web has three
// configs (2 as in quicConfig; 4, encrypted, four passes; 6, plaintext,
// of other lengths), given in another order; dns two (5 as in quicConfig,
// and 1, encrypted in a single pass), its backends' IDs in config 1 the
// same as in 5 where the lengths allow: each backend's server_id is an
// object by config ID.
var quicRotationConfig = func() string {
	cfg := strings.NewReplacer(
		`"quic": {"config_id": 2, "server_id_len": 3, "nonce_len": 6}`,
		`"quic": [{"config_id": 6, "server_id_len": 1, "nonce_len": 9}, {"config_id": 2, "server_id_len": 3, "nonce_len": 6}, `+
			`{"config_id": 4, "server_id_len": 5, "nonce_len": 7, "key": "8f95f09245765f80256934e50c66207f"}]`,
		`"quic": {"config_id": 5, "server_id_len": 15, "nonce_len": 4}`,
		`"quic": [{"config_id": 5, "server_id_len": 15, "nonce_len": 4}, {"config_id": 1, "server_id_len": 8, "nonce_len": 8, "key": "00112233445566778899aabbccddeeff"}]`,
	).Replace(quicConfig)
	for i := 1; i <= 6; i++ {
		d := string(rune('0' + i))
		web := strings.Repeat("a"+d, 3)
		cfg = strings.Replace(cfg, `"server_id": "`+web+`"`, `"server_id": {"2": "`+web+`", "4": "`+strings.Repeat("b"+d, 5)+`", "6": "c`+d+`"}`, 1)
		dns := strings.Repeat("a"+d, 15)
		cfg = strings.Replace(cfg, `"server_id": "`+dns+`"`, `"server_id": {"5": "`+dns+`", "1": "`+strings.Repeat("a"+d, 8)+`"}`, 1)
	}
	return cfg
}()

// quicUnderlay6Config is quicConfig with the dns and v6 tables' backends
// IPv6.
var quicUnderlay6Config = strings.NewReplacer(
	`"192.168.20.`, `"fd00:50::2:`, `"192.168.40.`, `"fd00:50::4:`).Replace(quicConfig)

// quicDest are UDP destinations of the QUIC tables' binds.
var quicDest = []struct {
	vip   string
	port  uint16
	table string
}{{"10.20.0.9", 1500, "web"}, {"10.20.0.200", 1000, "web"}, {"10.30.7.7", 53, "dns"}, {"fd00:30::9", 53, "v6"}}

func (g *gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	return b
}

// quicFrame is a UDP packet to a bind of a table with QUIC-LB routing, its
// payload a QUIC packet whose destination connection ID names one of the
// table's backends (serving or not), or of every kind that falls back:
// config rotation 0b111, another config, an unknown server ID, a client's
// Initial, hostile ID lengths, and payloads cut short.
func (g *gen) quicFrame(tabs []*table.Table) []byte {
	d := quicDest[g.rng.IntN(len(quicDest))]
	var t *table.Table
	for _, x := range tabs {
		if x.Name == d.table {
			t = x
		}
	}
	cs := t.QUIC.Configs()
	ci := g.rng.IntN(len(cs))
	q := cs[ci]
	sid := []byte(t.Backends[g.rng.IntN(len(t.Backends))].ServerIDIn(ci))
	rot := q.ConfigID
	switch g.rng.IntN(12) {
	case 0:
		rot = 7
	case 1:
		rot = uint8(g.rng.IntN(8))
	case 2:
		sid = g.bytes(int(q.ServerIDLen))
	}
	cid := append(append([]byte{rot<<5 | byte(q.CIDLen()-1)}, sid...), g.bytes(int(q.NonceLen))...)
	if q.Encrypted { // the server ID and nonce encrypted together
		c, err := cidcipher.New(q.Key, int(q.ServerIDLen), int(q.NonceLen))
		if err != nil {
			panic(err)
		}
		c.Encrypt(cid[1:], slices.Clone(cid[1:]))
	}
	vip := netip.MustParseAddr(d.vip)
	if g.rng.IntN(4) == 0 {
		return g.quotedQUIC(vip, d.port, cid)
	}
	var payload []byte
	if g.rng.IntN(3) == 0 { // a long header
		idLen := len(cid)
		switch g.rng.IntN(6) {
		case 0: // a client's Initial: an ID of its own choosing
			idLen = g.rng.IntN(21)
			cid = g.bytes(idLen)
		case 1: // a hostile length
			idLen = g.rng.IntN(256)
			cid = g.bytes(min(idLen, 40))
		}
		payload = append([]byte{0xc0 | byte(g.rng.IntN(64)), 0, 0, 0, 1, byte(idLen)}, cid...)
		payload = append(append(payload, 8), g.bytes(8)...) // the source ID
	} else {
		payload = append([]byte{0x40 | byte(g.rng.IntN(64))}, cid...)
	}
	payload = append(payload, g.bytes(20+g.rng.IntN(100))...)
	if g.rng.IntN(10) == 0 { // near and over the links' MTUs
		payload = append(payload, make([]byte, 1150+g.rng.IntN(400))...)
	}
	if g.rng.IntN(8) == 0 {
		payload = payload[:g.rng.IntN(len(payload)+1)]
	}
	l4 := pkt.UDP(uint16(1024+g.rng.IntN(60000)), d.port, payload)
	var ip []byte
	if vip.Is6() {
		ip = pkt.IPv6(g.client(true), vip, 17, l4)
	} else {
		ip = pkt.IPv4(g.client(false), vip, 17, l4, pkt.V4Opts{FragOff: []uint16{0x4000, 0}[g.rng.IntN(2)]})
	}
	return pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, pkt.EtherType(ip), ip)
}

// quotedQUIC is an ICMP error (fragmentation needed, or packet too big)
// to vip quoting a QUIC packet its server sent from port: a long header
// whose source connection ID is cid (the server's), after a destination ID
// of the client's, or a short header to the client's cid; some with
// hostile lengths, and quoted in part.
func (g *gen) quotedQUIC(vip netip.Addr, port uint16, cid []byte) []byte {
	var payload []byte
	if g.rng.IntN(2) == 0 {
		dcid, scid := g.bytes(g.rng.IntN(21)), cid
		dLen, sLen := len(dcid), len(scid)
		switch g.rng.IntN(8) {
		case 0:
			dLen = 21 + g.rng.IntN(235)
		case 1:
			sLen = g.rng.IntN(256)
			scid = g.bytes(min(sLen, 40))
		}
		payload = append([]byte{0xc0 | byte(g.rng.IntN(64)), 0, 0, 0, 1, byte(dLen)}, dcid...)
		payload = append(append(payload, byte(sLen)), scid...)
	} else {
		payload = append([]byte{0x40 | byte(g.rng.IntN(64))}, cid...)
	}
	payload = append(payload, g.bytes(20+g.rng.IntN(100))...)
	l4 := pkt.UDP(port, uint16(1024+g.rng.IntN(60000)), payload)
	if vip.Is6() {
		quoted := pkt.IPv6(vip, g.client(true), 17, l4)
		quoted = quoted[:48+g.rng.IntN(len(quoted)-47)]
		ip := pkt.IPv6(netip.MustParseAddr("2001:db8::1"), vip, 58, pkt.ICMP(2, 0, 1280, quoted))
		return pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, pkt.EtherType(ip), ip)
	}
	quoted := pkt.IPv4(vip, g.client(false), 17, l4, pkt.V4Opts{FragOff: 0x4000})
	quoted = quoted[:28+g.rng.IntN(len(quoted)-27)]
	ip := pkt.IPv4(netip.MustParseAddr("198.51.100.1"), vip, 1, pkt.ICMP(3, 4, 1400, quoted), pkt.V4Opts{})
	return pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, pkt.EtherType(ip), ip)
}

// quicCounters are QUIC-LB routing's counters, each of which the QUIC
// cases' traffic must move.
var quicCounters = []int{model.QUICRouted, model.QUICShort, model.QUICCIDLen, model.QUICUnroutable, model.QUICOtherConfig,
	model.QUICUnknownID, model.QUICICMPRouted}

// TestQUICFindsEveryServerID fills a table with 256 backends, IDs of the
// longest length, and sends each a short-header packet naming it: the
// kernel sends each to its backend, as the model does, and the table reads
// back with every server ID.
func TestQUICFindsEveryServerID(t *testing.T) {
	testenv.Kernel(t)
	g := &gen{rng: rngFor(37)}
	var bs []string
	for i := 0; i < table.MaxBackends; i++ {
		state := []string{"active", "draining", "filling", "inactive"}[i%4]
		bs = append(bs, fmt.Sprintf(`{"ip": "10.9.%d.%d", "state": "%s", "healthy": %v, "server_id": "%x"}`,
			i/256, i%256, state, i%7 != 0, g.bytes(15)))
	}
	cfg := `{"tables": [{"name": "q", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
	  "quic": {"config_id": 1, "server_id_len": 15, "nonce_len": 4},
	  "binds": [{"ip": "10.20.0.1", "proto": "udp", "port": 443}], "backends": [` + strings.Join(bs, ", ") + `]}]}`
	d, m := setupWith(t, directorConfig(), cfg)
	tab := m.Tables[0]
	tl := &tally{tablePackets: map[int]uint64{}, backendPackets: map[string]uint64{}, exact: exactSet(m.Tables)}
	routed := 0
	for i, b := range tab.Backends {
		cid := append(append([]byte{1<<5 | 19}, b.ServerID...), g.bytes(4)...)
		payload := append(append([]byte{0x41}, cid...), g.bytes(40)...)
		ip := pkt.IPv4(g.client(false), netip.MustParseAddr("10.20.0.1"), 17, pkt.UDP(40000, 443, payload), pkt.V4Opts{})
		f := pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, 0x0800, ip)
		want := m.Process(f)
		if b.Serving() != (want.QUIC == model.QUICRouted) || (b.Serving() && want.HopList[0] != b.IP) {
			t.Fatalf("backend %d (%s, serving %v): the model sends its ID to %s (%s)", i, b.IP, b.Serving(), want.HopList[0], CounterNames()[want.QUIC])
		}
		if b.Serving() {
			routed++
		}
		if diff := compare(d, m, f, tl); diff != "" {
			t.Errorf("backend %d (%s): %s", i, b.IP, diff)
		}
	}
	checkCounters(t, d, tl)
	if routed < 100 {
		t.Fatalf("only %d serving backends", routed)
	}
	live, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	lt := live[0].Table
	if lt.QUIC != tab.QUIC {
		t.Errorf("read back QUIC %+v, applied %+v", lt.QUIC, tab.QUIC)
	}
	for i, b := range lt.Backends {
		if b.ServerID != tab.Backends[i].ServerID {
			t.Errorf("backend %d read back with server ID %s, applied %s", i, b.ServerID, tab.Backends[i].ServerID)
		}
	}
}

// TestQUICKeyReadsBack: the tables of encrypted IDs read back with their
// keys (so that their fingerprints are the applied ones), and a key entry
// that is not a key's schedule is corrupt, not read as some other key.
func TestQUICKeyReadsBack(t *testing.T) {
	testenv.Kernel(t)
	d, m := setupWith(t, directorConfig(), quicEncryptedConfig)
	live, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	slot, config := -1, uint8(0)
	for i, lt := range live {
		if lt.Table.QUIC != m.Tables[i].QUIC || table.Fingerprint(lt.Table) != table.Fingerprint(m.Tables[i]) {
			t.Errorf("tables[%d] read back with QUIC %v, applied %v (or another fingerprint)", i, lt.Table.QUIC, m.Tables[i].QUIC)
		}
		if lt.Table.QUIC.Encrypted {
			slot, config = lt.Slot, lt.Table.QUIC.ConfigID
		}
	}
	if slot < 0 {
		t.Fatal("no table of encrypted IDs read back")
	}
	var k abi.AESKey
	if err := d.Maps.QuicKeys.Lookup(abi.QUICKey(slot, config), &k); err != nil {
		t.Fatal(err)
	}
	k.Dec[20] ^= 1
	if err := d.Maps.QuicKeys.Put(abi.QUICKey(slot, config), &k); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Live(); err == nil || !strings.Contains(err.Error(), "corrupt QUIC key") {
		t.Errorf("a corrupt key read back: %v", err)
	}
}

// TestQUICRotation: a table's configs read back as applied (every
// config's settings, key and server IDs), each in a quic_ids entry of its
// own that a change removing the config deletes; and a plan that removes a
// config watches what it carries: unsafe while packets carry its IDs, safe
// once they stop.
func TestQUICRotation(t *testing.T) {
	testenv.Kernel(t)
	d, m := setupWith(t, directorConfig(), quicRotationConfig)
	entries := func(mp *ebpf.Map) int {
		n := 0
		var k uint32
		var err error
		for err = mp.NextKey(nil, &k); err == nil; err = mp.NextKey(k, &k) {
			n++
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
		return n
	}
	checkLive := func(want []*table.Table, ids, keys int) {
		t.Helper()
		live, err := d.Live()
		if err != nil {
			t.Fatal(err)
		}
		for i, lt := range live {
			if lt.Table.QUIC != want[i].QUIC || table.Fingerprint(lt.Table) != table.Fingerprint(want[i]) {
				t.Errorf("tables[%d] read back with QUIC %v, applied %v (or another fingerprint)", i, lt.Table.QUIC, want[i].QUIC)
			}
			for j, b := range lt.Table.Backends {
				if w := want[i].Backends[j]; b.ServerID != w.ServerID || b.MoreServerIDs != w.MoreServerIDs {
					t.Errorf("tables[%d].backends[%d] read back with IDs %s, applied %s", i, j, want[i].QUIC.ServerIDsOf(b), want[i].QUIC.ServerIDsOf(w))
				}
			}
		}
		if n := entries(d.Maps.QuicIds); n != ids {
			t.Errorf("quic_ids holds %d configs, want %d", n, ids)
		}
		if n := entries(d.Maps.QuicKeys); n != keys {
			t.Errorf("quic_keys holds %d keys, want %d", n, keys)
		}
	}
	// web: 3 configs, 1 encrypted; dns: 2, 1 encrypted; v6: 1.
	checkLive(m.Tables, 6, 2)

	// A packet with web's config 6 ID of its first backend.
	web := m.Tables[0]
	_, ci, _ := web.QUIC.Config(6)
	cid := append(append([]byte{6<<5 | 10}, web.Backends[0].ServerIDIn(ci)...), make([]byte, 9)...)
	payload := append(append([]byte{0x41}, cid...), make([]byte, 40)...)
	ip := pkt.IPv4(netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.20.0.9"), 17, pkt.UDP(40000, 1500, payload), pkt.V4Opts{})
	frame := pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, 0x0800, ip)
	if r := m.Process(frame); r.QUIC != model.QUICRouted || r.QUICConfig != 6 || r.HopList[0] != web.Backends[0].IP {
		t.Fatalf("the model sends config 6's ID to %v (%s, config %d)", r.HopList, CounterNames()[r.QUIC], r.QUICConfig)
	}

	// Config 6 taken out of web.
	cfg := strings.Replace(quicRotationConfig, `{"config_id": 6, "server_id_len": 1, "nonce_len": 9}, `, "", 1)
	cfg = regexp.MustCompile(`, "6": "c\d"`).ReplaceAllString(cfg, "")
	tabs := testTables(t, cfg)
	d.QUICWindow = 300 * time.Millisecond
	stop, sent := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			if _, _, err := testrun.Run(d.Prog, frame); err == nil {
				n++
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	plan, err := d.Plan(&Proposal{Tables: tabs})
	close(stop)
	n := <-sent
	if err != nil {
		t.Fatal(err)
	}
	if plan.Safe || len(plan.Reasons) != 1 || !strings.Contains(plan.Reasons[0], "table web: QUIC config 6 removed while in use: ") ||
		!strings.Contains(plan.Reasons[0], "packets carried its IDs in the last 300ms") {
		t.Errorf("removing config 6 while %d packets carry its IDs: safe %v, reasons %q", n, plan.Safe, plan.Reasons)
	}
	plan, err = d.Plan(&Proposal{Tables: tabs})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Safe {
		t.Errorf("removing config 6 once idle: reasons %q", plan.Reasons)
	}
	if qc := plan.Diff.Tables[0].QUICConfigs; len(qc) != 1 || qc[0].ConfigID != 6 || qc[0].Change != "removed" || qc[0].Recent == nil || *qc[0].Recent != 0 {
		t.Errorf("the diff's config changes: %+v", qc)
	}
	if _, _, err := d.Commit(&Proposal{Tables: tabs}, nil); err != nil {
		t.Fatal(err)
	}
	// The old web table (3 configs, 1 key) stays in the previous
	// generation's slot, which packets may still read, beside the new
	// (2 configs, 1 key); the next change sweeps it.
	checkLive(tabs, 6+2, 2+1)
	tabs2 := testTables(t, strings.Replace(cfg, `"nonce_len": 6}, {"config_id": 4`, `"nonce_len": 7}, {"config_id": 4`, 1))
	if _, _, err := d.Commit(&Proposal{Tables: tabs2}, func(State, *table.Plan) error { return nil }); err != nil {
		t.Fatal(err)
	}
	checkLive(tabs2, 5+2, 2+1)
	// Config 6's IDs now follow the row.
	if r, _, err := testrun.Run(d.Prog, frame); err != nil || r != 3 {
		t.Fatalf("verdict %d, %v", r, err)
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range st.Tables[0].QUIC {
		if q.ConfigID != nil && *q.ConfigID == 6 && q.Counters["quic_fallback_other_config"] == 0 {
			t.Errorf("config 6's counters after its removal: %v", q.Counters)
		}
	}
}
