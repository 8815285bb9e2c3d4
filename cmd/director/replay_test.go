package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/internal/lab/golden"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/internal/replay"
	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

const capDir = "../../testdata/captures/"

// TestReplayGolden replays the committed capture; stdout only (stderr
// carries the timing).
func TestReplayGolden(t *testing.T) {
	testenv.Kernel(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"replay-small", []string{"replay", capDir + "small.pcap", "--config", cfgDir + "small.json"}},
		{"replay-small-against", []string{"replay", capDir + "small.pcap", "--config", cfgDir + "small.json", "--against", cfgDir + "small-draining.json"}},
		{"replay-small-json", []string{"replay", capDir + "small.pcap", "--config", cfgDir + "small.json", "--against", cfgDir + "small-removed.json", "--json", "--verify"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCmd(c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			golden.Check(t, c.name+".txt", []byte(out))
		})
	}
}

// TestReplayVerifyLarge replays a generated capture of more than 100,000
// packets through the kernel and the model: they must agree on every one.
func TestReplayVerifyLarge(t *testing.T) {
	testenv.Kernel(t)
	pcap, r, errOut := replayVerified(t, "medium.json", 14000, 3)
	if r.Capture.Packets < uint64(testenv.Reduced(100000)) {
		t.Fatalf("capture %+v", r.Capture)
	}
	if r.Verdicts["tx"].Packets == 0 || r.Reasons["pass_no_bind"].Packets == 0 || r.Reasons["pass_not_ip"].Packets == 0 {
		t.Fatalf("the capture does not exercise the datapath: %+v %+v", r.Verdicts, r.Reasons)
	}
	t.Logf("%d packets, %s", r.Capture.Packets, strings.TrimSpace(errOut))

	// The model alone gives the same report.
	mout, _, code := runCmd("replay", pcap, "--config", cfgDir+"medium.json", "--json", "--model")
	kout, _, _ := runCmd("replay", pcap, "--config", cfgDir+"medium.json", "--json")
	if code != 0 || mout != kout {
		t.Fatalf("--model report differs from the kernel's")
	}

	// And so it does against a change: the model's workers count flows
	// apart and merge them; the kernel's replay counts them in one place.
	raw, err := os.ReadFile(cfgDir + "medium.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	bs := cfg["tables"].([]any)[0].(map[string]any)["backends"].([]any)
	bs[0].(map[string]any)["state"] = "draining"
	bs[1].(map[string]any)["healthy"] = false
	cfg["tables"].([]any)[0].(map[string]any)["backends"] = bs[:len(bs)-1]
	changed := filepath.Join(t.TempDir(), "changed.json")
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(changed, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	mout, _, code = runCmd("replay", pcap, "--config", cfgDir+"medium.json", "--against", changed, "--json", "--model")
	kout, _, _ = runCmd("replay", pcap, "--config", cfgDir+"medium.json", "--against", changed, "--json")
	var mr replay.Report
	if err := json.Unmarshal([]byte(mout), &mr); err != nil {
		t.Fatal(err)
	}
	if code != 0 || mr.Against == nil || mr.Against.Survive.Flows == 0 || mr.Against.Break.Flows == 0 {
		t.Fatalf("the change does not exercise --against: %+v", mr.Against)
	}
	if mout != kout {
		t.Fatalf("--model --against report differs from the kernel's")
	}
	// With one CPU the reader counts every flow itself; with three, two
	// workers share them out.
	for _, procs := range []int{1, 3} {
		old := runtime.GOMAXPROCS(procs)
		pout, _, code := runCmd("replay", pcap, "--config", cfgDir+"medium.json", "--against", changed, "--json", "--model")
		runtime.GOMAXPROCS(old)
		if code != 0 || pout != kout {
			t.Fatalf("--model --against with GOMAXPROCS %d: report differs from the kernel's", procs)
		}
	}
}

// TestReplayAgainstMatchesDiff checks --against against the table diff of
// the same change: flow by flow, a flow moves exactly when its row's
// primary changes, and the share of flows that move is the share of rows
// that do, within statistical bounds.
func TestReplayAgainstMatchesDiff(t *testing.T) {
	testenv.Kernel(t)
	pcap := filepath.Join(t.TempDir(), "c.pcap")
	mustRun(t, 0, "gen-capture", "--config", cfgDir+"small.json", "-o", pcap, "--flows", fmt.Sprint(testenv.Reduced(4000)), "--seed", "9")
	for _, newCfg := range []string{"small-draining.json", "small-removed.json", "small-added.json"} {
		out, errOut, code := runCmd("replay", pcap, "--config", cfgDir+"small.json", "--against", cfgDir+newCfg, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var r replay.Report
		json.Unmarshal([]byte(out), &r)
		a := r.Against

		// Expected, from the tables: each flow's row under the default hash.
		oldT, _ := config.Load(cfgDir + "small.json")
		newT, _ := config.Load(cfgDir + newCfg)
		o, n := oldT.Tables[0], newT.Tables[0]
		dc := table.DefaultDirectorConfig()
		dc.SrcIP = netip.MustParseAddr("192.0.2.1")
		m := model.New(dc, [6]byte{}, oldT.Tables)
		rd, err := pcapfile.Open(pcap)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[replay.FlowKey]bool{}
		var flows, moved, broke uint64
		for {
			p, err := rd.Read()
			if err != nil {
				break
			}
			res := m.Process(p.Frame)
			if res.Verdict != model.XDPTX {
				continue
			}
			k := replay.FlowKey{Client: res.Client, VIP: res.VIP, ClientPort: res.ClientPort, VIPPort: res.VIPPort, Proto: res.Proto}
			if seen[k] {
				continue
			}
			seen[k] = true
			flows++
			row := res.Row
			op := o.Backends[o.Rows[row].Primary].IP
			np, ns := n.Backends[n.Rows[row].Primary].IP, n.Backends[n.Rows[row].Secondary].IP
			if op != np {
				moved++
				if op != ns {
					broke++
				}
			}
		}
		rd.Close()
		if a.Flows != flows || a.PrimaryChanged.Flows != moved || a.Break.Flows != broke || a.Survive.Flows != moved-broke {
			t.Errorf("%s: against %+v; from the tables: %d flows, %d moved, %d break", newCfg, a, flows, moved, broke)
		}
		d := table.Compare(oldT.Tables, newT.Tables).Tables[0]
		rowShare := float64(d.Rows.PrimaryChanged) / table.Rows
		flowShare := float64(moved) / float64(flows)
		sigma := math.Sqrt(rowShare * (1 - rowShare) / float64(flows))
		if math.Abs(flowShare-rowShare) > 4*sigma+1e-9 {
			t.Errorf("%s: %.3f of flows moved, %.3f of rows (sigma %.3f)", newCfg, flowShare, rowShare, sigma)
		}
		t.Logf("%s: %d/%d flows moved (%.3f), rows %.3f", newCfg, moved, flows, flowShare, rowShare)
	}
}

func TestReplayBrokenCaptures(t *testing.T) {
	testenv.Kernel(t)
	data, err := os.ReadFile(capDir + "small.pcap")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	trunc := filepath.Join(dir, "trunc.pcap")
	os.WriteFile(trunc, data[:len(data)/2], 0o644)
	garbage := filepath.Join(dir, "garbage.pcap")
	os.WriteFile(garbage, []byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"), 0o644)
	for _, c := range []struct {
		file, want string
	}{
		{trunc, "packets were processed"},
		{garbage, "not a pcap or pcapng file"},
		{filepath.Join(dir, "missing.pcap"), "no such file"},
	} {
		_, errOut, code := runCmd("replay", c.file, "--config", cfgDir+"small.json")
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", filepath.Base(c.file), code, errOut, c.want)
		}
	}
	if _, errOut, code := runCmd("replay", capDir+"small.pcap"); code != 1 || !strings.Contains(errOut, "--config CONFIG is required") {
		t.Errorf("no config: %d %s", code, errOut)
	}
}

func TestGenCaptureDeterministic(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	mustRun(t, 0, "gen-capture", "--config", cfgDir+"ipv6.json", "-o", a, "--flows", "200", "--seed", "4")
	mustRun(t, 0, "gen-capture", "--config", cfgDir+"ipv6.json", "-o", b, "--flows", "200", "--seed", "4")
	x, _ := os.ReadFile(a)
	y, _ := os.ReadFile(b)
	if len(x) == 0 || string(x) != string(y) {
		t.Fatal("gen-capture is not deterministic")
	}
}

// TestBenchRunsAndCleansUp runs bench briefly in both modes: it must
// report traffic and leave no interface behind.
func TestBenchRunsAndCleansUp(t *testing.T) {
	testenv.Kernel(t)
	before, _ := net.Interfaces()
	for _, mode := range []string{"native", "generic"} {
		out, errOut, code := runCmd("bench", capDir+"small.pcap", "--config", cfgDir+"small.json", "--duration", "300ms", "--mode", mode, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, errOut)
		}
		var d benchDoc
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
		if d.Director.Runs == 0 || d.Baseline.Runs == 0 || d.Director.NsPerPacket <= 0 || d.Counters["encapsulated"].(float64) == 0 ||
			d.Director.DistinctFrames != d.Frames {
			t.Fatalf("%s: %+v", mode, d)
		}
		t.Logf("%s: director %.0f pps %.1f ns, baseline %.0f pps %.1f ns", mode, d.Director.PacketsPerSec, d.Director.NsPerPacket, d.Baseline.PacketsPerSec, d.Baseline.NsPerPacket)
	}
	// A capture to prefix, port-range and exact binds, longer than the
	// generator holds: the cost by path, and how many frames were sent.
	// GLB's example config has a port range on a /24 too large to be
	// spelled out in the exact table whole (only the address it is
	// written with is), so every path has frames.
	pcap := filepath.Join(t.TempDir(), "m.pcap")
	mustRun(t, 0, "gen-capture", "--config", cfgDir+"glb-example.json", "-o", pcap, "--flows", "8000", "--seed", "5")
	// 50 ms, not more: without live frames (a kernel that refuses them,
	// as some hosts' do) a packet socket sends a window a call, about
	// 300,000 frames a second on a 2-core host, and 200 ms would send
	// the whole capture.
	out, errOut, code := runCmd("bench", pcap, "--config", cfgDir+"glb-example.json", "--duration", "50ms", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var d benchDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, p := range d.Paths {
		sum += p.Frames
		if p.Frames == 0 || p.Run.Runs == 0 || p.Run.NsPerPacket <= 0 || p.Run.DistinctFrames == 0 || p.Run.DistinctFrames > p.Frames {
			t.Errorf("path %+v", p)
		}
	}
	if len(d.Paths) != 3 || d.Paths[0].Path != "exact" || d.Paths[1].Path != "prefix_range" || d.Paths[2].Path != "passed" || sum != d.Frames {
		t.Fatalf("paths %+v of %d frames", d.Paths, d.Frames)
	}
	if d.Frames <= 4096 || d.Director.DistinctFrames == 0 || d.Director.DistinctFrames >= d.Frames {
		t.Fatalf("%d frames, %d sent in 50ms (%s): the capture should not fit", d.Frames, d.Director.DistinctFrames, d.Director.Injector)
	}
	text, _, _ := runCmd("bench", pcap, "--config", cfgDir+"glb-example.json", "--duration", "50ms")
	for _, s := range []string{"program cost above an empty XDP_TX program", "exact table", "group table/trie",
		fmt.Sprintf("of %d frames sent", d.Frames), "a longer capture is sent in windows", "not the director's capacity"} {
		if !strings.Contains(text, s) {
			t.Errorf("bench text lacks %q:\n%s", s, text)
		}
	}
	after, _ := net.Interfaces()
	if len(after) != len(before) {
		t.Fatalf("bench left interfaces behind: %v -> %v", before, after)
	}
}

// TestReplayVerifyMultiBuffer replays jumbo and GRO frames (a capture from
// a host with a 9,000-byte MTU or GRO): the kernel, which gets them as
// multi-buffer frames, and the model agree on each; frames too big to
// encapsulate are reported under their own reason.
func TestReplayVerifyMultiBuffer(t *testing.T) {
	testenv.Kernel(t)
	path := filepath.Join(t.TempDir(), "jumbo.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapfile.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	c4, vip := netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("10.10.10.10")
	multi := 0
	for size := 3400; size <= 9000; size += 100 {
		for port := uint16(40000); port < 40003; port++ {
			w.Write(time.Unix(1, 0), pkt.Frame(pkt.IPv4(c4, vip, 6, pkt.TCP(port, 80, 0x10, make([]byte, size-14-40)), pkt.V4Opts{})))
			if size > model.FirstBuffer {
				multi++
			}
		}
	}
	for _, tot := range []int{65000, 65535} { // GRO: the first fits, the second does not
		w.Write(time.Unix(2, 0), pkt.Frame(pkt.IPv4(c4, vip, 6, pkt.TCP(40000, 443, 0x10, make([]byte, tot-40)), pkt.V4Opts{})))
		multi++
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, errOut, code := runCmd("replay", path, "--config", cfgDir+"small.json", "--verify", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r replay.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Verify.Mismatches != 0 || r.Capture.MultiBuffer != uint64(multi) || r.Reasons["pass_too_big"].Packets != 1 ||
		r.Verdicts["tx"].Packets != r.Capture.Packets-1 {
		t.Fatalf("capture %+v, verdicts %+v, reasons %+v, verify %+v", r.Capture, r.Verdicts, r.Reasons, r.Verify)
	}
	// On a kernel without multi-buffer XDP its BPF_PROG_RUN takes none of
	// them: they are the model's, said so, and not compared.
	notRun := 0
	if len(xdpbuild.Lacking()) > 0 {
		notRun = multi
	}
	if r.Capture.NotRun != uint64(notRun) || r.Verify.Compared != r.Capture.Packets-uint64(notRun) {
		t.Fatalf("%d frames not run by the kernel and %d compared, want %d and %d", r.Capture.NotRun, r.Verify.Compared,
			notRun, r.Capture.Packets-uint64(notRun))
	}
	text, _, _ := runCmd("replay", path, "--config", cfgDir+"small.json", "--model")
	if !strings.Contains(text, fmt.Sprintf("%d multi-buffer (over %d bytes)", multi, model.FirstBuffer)) || !strings.Contains(text, "pass_too_big") {
		t.Errorf("text report:\n%s", text)
	}
}

// TestReplayVerifyIPv6Underlay replays traffic to tables of IPv6 backends
// (an IPv6 VIP's and an IPv4 VIP's) with a director config that has only
// an IPv6 source: the kernel's GUE over IPv6 and the model's agree on
// every packet, the report names the IPv6 backends, the model alone gives
// the same report, with --against too, and bench runs it. With a link MTU
// the larger packets do not fit once encapsulated, they agree on the
// too-big replies as well.
func TestReplayVerifyIPv6Underlay(t *testing.T) {
	testenv.Kernel(t)
	tmp := t.TempDir()
	cfg, dconf := cfgDir+"ipv6-backends.json", cfgDir+"director6.conf"
	pcap := filepath.Join(tmp, "v6.pcap")
	mustRun(t, 0, "gen-capture", "--config", cfg, "-o", pcap, "--flows", fmt.Sprint(testenv.Reduced(3000)), "--seed", "4")
	report := func(extra ...string) replay.Report {
		t.Helper()
		out, errOut, code := runCmd(append([]string{"replay", pcap, "--config", cfg, "--json"}, extra...)...)
		if code != 0 {
			t.Fatalf("replay %v: exit %d: %s", extra, code, errOut)
		}
		var r replay.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := report("--director-config", dconf, "--verify")
	if r.Verify == nil || r.Verify.Compared != r.Capture.Packets || r.Verify.Mismatches != 0 || r.Verdicts["tx"].Packets == 0 {
		t.Fatalf("verify %+v, verdicts %+v", r.Verify, r.Verdicts)
	}
	if len(r.Tables) != 2 || len(r.Tables[0].Backends) != 8 || !strings.HasPrefix(r.Tables[0].Backends[0].IP, "fd00:50::") ||
		len(r.Tables[1].Backends) != 4 || !strings.HasPrefix(r.Tables[1].Backends[0].IP, "fd00:51::") {
		t.Fatalf("tables %+v", r.Tables)
	}
	kout, _, _ := runCmd("replay", pcap, "--config", cfg, "--director-config", dconf, "--json")
	mout, _, code := runCmd("replay", pcap, "--config", cfg, "--director-config", dconf, "--json", "--model")
	if code != 0 || kout != mout {
		t.Fatal("--model report differs from the kernel's")
	}
	kout, _, _ = runCmd("replay", pcap, "--config", cfg, "--director-config", dconf, "--against", cfgDir+"ipv6-backends.json", "--json")
	mout, _, code = runCmd("replay", pcap, "--config", cfg, "--director-config", dconf, "--against", cfgDir+"ipv6-backends.json", "--json", "--model")
	if code != 0 || kout != mout {
		t.Fatal("--model --against report differs from the kernel's")
	}

	// A link of 1,280 bytes: the capture's larger packets are answered
	// too big, or encapsulated all the same, alike in kernel and model.
	raw, err := os.ReadFile(dconf)
	if err != nil {
		t.Fatal(err)
	}
	mtuConf := filepath.Join(tmp, "director-mtu.conf")
	if err := os.WriteFile(mtuConf, []byte(strings.Replace(string(raw), "{", `{"outbound_mtu": 1280,`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	rm := report("--director-config", mtuConf, "--verify")
	if rm.Verify == nil || rm.Verify.Mismatches != 0 || rm.Verdicts["tx"].Packets != r.Verdicts["tx"].Packets {
		t.Fatalf("with outbound_mtu: verify %+v, verdicts %+v (without: %+v)", rm.Verify, rm.Verdicts, r.Verdicts)
	}
	steered := func(r replay.Report) (n uint64) {
		for _, tb := range r.Tables {
			n += tb.Packets
		}
		return n
	}
	if steered(rm) >= steered(r) {
		t.Fatalf("with outbound_mtu 1280, %d packets still reach the tables' backends (%d without): none was answered too big", steered(rm), steered(r))
	}

	out, errOut, code := runCmd("bench", pcap, "--config", cfg, "--director-config", dconf, "--duration", "200ms", "--json")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errOut)
	}
	var d benchDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if d.Director.Runs == 0 || d.Counters["encapsulated"].(float64) == 0 {
		t.Fatalf("bench over the IPv6 underlay: %+v", d)
	}
	// Without a director config, the lab's defaults have an IPv6 source.
	if _, errOut, code := runCmd("replay", pcap, "--config", cfg, "--verify"); code != 0 {
		t.Fatalf("replay of IPv6 backends without --director-config: exit %d: %s", code, errOut)
	}
}

// TestReplayPictureOfATableWithoutTraffic: a table no packet of the
// capture reaches is drawn empty (its rows once panicked the picture).
func TestReplayPictureOfATableWithoutTraffic(t *testing.T) {
	var doc map[string]any
	data, err := os.ReadFile(cfgDir + "small.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	tables := doc["tables"].([]any)
	other := map[string]any{}
	for k, v := range tables[0].(map[string]any) {
		other[k] = v
	}
	other["name"] = "quiet"
	other["binds"] = []any{map[string]any{"ip": "10.99.99.99", "proto": "tcp", "port": 80}}
	doc["tables"] = []any{other, tables[0]} // the quiet one first
	cfg := filepath.Join(t.TempDir(), "two.json")
	data, _ = json.Marshal(doc)
	if err := os.WriteFile(cfg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	pic := filepath.Join(t.TempDir(), "rows.png")
	_, errOut, code := runCmd("replay", capDir+"small.pcap", "--config", cfg, "--model", "--picture", pic)
	if code != 0 || !strings.Contains(errOut, "picture of 2 tables written") {
		t.Fatalf("replay --picture: exit %d: %s", code, errOut)
	}
	if st, err := os.Stat(pic); err != nil || st.Size() == 0 {
		t.Fatalf("no picture: %v", err)
	}
}

// TestReplayQUIC replays QUIC connections (gen-capture's, to a table with
// QUIC-LB routing, some of them rebinding to a new port): the kernel
// equals the model packet by packet, the report counts the packets routed
// by connection ID and those that fell back, and the model alone (--model)
// gives the same report, with and without --against.
func TestReplayQUIC(t *testing.T) {
	testenv.Kernel(t)
	pcap, r, _ := replayVerified(t, "quic.json", 4000, 5)
	// quic.json's backends: two active, one draining (serving), one
	// unhealthy (not): a quarter of the connections' IDs fall back.
	routed, unknown := r.QUIC["quic_routed"].Packets, r.QUIC["quic_fallback_unknown_id"].Packets
	if routed == 0 || unknown == 0 || routed < 2*unknown {
		t.Fatalf("QUIC counts %+v", r.QUIC)
	}
	kout, _, _ := runCmd("replay", pcap, "--config", cfgDir+"quic.json", "--json")
	mout, _, code := runCmd("replay", pcap, "--config", cfgDir+"quic.json", "--json", "--model")
	if code != 0 || mout != kout {
		t.Fatalf("--model report differs from the kernel's:\n%s\n%s", mout, kout)
	}
	kout, _, _ = runCmd("replay", pcap, "--config", cfgDir+"quic.json", "--against", cfgDir+"quic-server-id.json", "--json")
	mout, _, code = runCmd("replay", pcap, "--config", cfgDir+"quic.json", "--against", cfgDir+"quic-server-id.json", "--json", "--model")
	if code != 0 || mout != kout {
		t.Fatalf("--model --against report differs from the kernel's")
	}
	text, _, _ := runCmd("replay", pcap, "--config", cfgDir+"quic.json")
	if !strings.Contains(text, "QUIC-LB (UDP to tables with a quic block):") || !strings.Contains(text, "quic_routed") {
		t.Errorf("the text report does not give the QUIC counts:\n%s", text)
	}
}

// replayVerified generates a capture of flows flows (fewer in the guests)
// to cfg's binds, replays it with --verify, and requires the kernel and
// the model to agree on every packet: the capture, the report and the
// replay's stderr.
func replayVerified(t *testing.T, cfg string, flows int, seed int) (string, replay.Report, string) {
	t.Helper()
	pcap := filepath.Join(t.TempDir(), strings.TrimSuffix(cfg, ".json")+".pcap")
	mustRun(t, 0, "gen-capture", "--config", cfgDir+cfg, "-o", pcap, "--flows", fmt.Sprint(testenv.Reduced(flows)), "--seed", fmt.Sprint(seed))
	out, errOut, code := runCmd("replay", pcap, "--config", cfgDir+cfg, "--verify", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r replay.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Verify == nil || r.Verify.Compared != r.Capture.Packets || r.Verify.Mismatches != 0 {
		t.Fatalf("capture %+v, verify %+v", r.Capture, r.Verify)
	}
	return pcap, r, errOut
}
