package loader

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/director/director/loader/testrun"
	"github.com/director/director/table/config"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/table"
)

// configB changes configA (testConfig) in every way an apply can: a
// backend drained and one removed, a bind removed and one added, a table
// removed and one added.
const configB = `{"tables": [
 {"name": "web", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
  "binds": [{"ip": "10.20.0.1", "proto": "tcp", "port": 80}, {"ip": "fd00:20::1", "proto": "tcp", "port": 443},
            {"ip": "10.20.0.0/24", "proto": "udp", "port_start": 1000, "port_end": 2000}, {"ip": "10.20.0.2", "proto": "tcp", "port": 80}],
  "backends": [{"ip": "192.168.10.1", "state": "draining", "healthy": true}, {"ip": "192.168.10.2", "state": "active", "healthy": true},
               {"ip": "192.168.10.4", "state": "active", "healthy": true},
               {"ip": "192.168.10.5", "state": "active", "healthy": true}, {"ip": "192.168.10.6", "state": "active", "healthy": true}]},
 {"name": "dns", "hash_key": "ffeeddccbbaa99887766554433221100", "seed": "00000000000000000000000000000001",
  "binds": [{"ip": "10.30.0.0/16", "proto": "udp", "port": 53}, {"ip": "10.30.0.0/16", "proto": "tcp", "port": 53}],
  "backends": [{"ip": "192.168.20.1", "state": "active", "healthy": true}, {"ip": "192.168.20.2", "state": "active", "healthy": true},
               {"ip": "192.168.20.3", "state": "active", "healthy": true}]},
 {"name": "mail", "hash_key": "11111111111111111111111111111111", "seed": "22222222222222222222222222222222",
  "binds": [{"ip": "10.50.0.1", "proto": "tcp", "port": 25}, {"ip": "10.20.0.1", "proto": "tcp", "port": 443}],
  "backends": [{"ip": "192.168.50.1", "state": "active", "healthy": true}, {"ip": "192.168.50.2", "state": "active", "healthy": true}]}
]}`

func fingerprints(ts []*table.Table) string {
	var b bytes.Buffer
	for _, t := range ts {
		fmt.Fprintf(&b, "%s=%s ", t.Name, table.Fingerprint(t))
	}
	return b.String()
}

// probeFrames are packets whose fate differs between configA and configB.
func probeFrames() [][]byte {
	g := &gen{rng: rngFor(5)}
	var out [][]byte
	for i := 0; i < 300; i++ {
		out = append(out, pkt.Frame(g.steeredIP()))
	}
	for _, dst := range []string{"10.20.0.2", "10.50.0.1", "10.20.0.1"} {
		for _, port := range []uint16{25, 80, 443} {
			out = append(out, pkt.Frame(pkt.IPv4(g.client(false), a(dst), 6, pkt.TCP(40000, port, 2, nil), pkt.V4Opts{})))
		}
	}
	return out
}

// TestApplyIsAtomic runs packets through the program while applies switch
// between two configs: every packet must be handled exactly as one of the
// two configs says, never by a mix of them.
func TestApplyIsAtomic(t *testing.T) {
	testenv.Kernel(t)
	dc := directorConfig()
	d, mA := setup(t, dc)
	tabsA, tabsB := testTables(t, testConfig), testTables(t, configB)
	// Without history (history_s 0), each config is its tables alone, so
	// that a packet is handled as A or B says; TestKillDuringApply holds
	// the tables and their histories together.
	for _, tt := range append(slices.Clone(tabsA), tabsB...) {
		tt.History = table.HistorySettings{}
	}
	mB := model.New(dc, pkt.GatewayMAC, tabsB)
	frames := probeFrames()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	seen := map[string]int{}
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				f := frames[(n*7+w)%len(frames)]
				v, out, err := testrun.Run(d.Prog, f)
				ra, rb := mA.Process(f), mB.Process(f)
				okA := err == nil && int(v) == ra.Verdict && bytes.Equal(out, ra.Out)
				okB := err == nil && int(v) == rb.Verdict && bytes.Equal(out, rb.Out)
				mu.Lock()
				switch {
				case okA && okB:
					seen["both"]++
				case okA:
					seen["A"]++
				case okB:
					seen["B"]++
				default:
					if len(bad) < 5 {
						bad = append(bad, fmt.Sprintf("frame %x: verdict %d err %v", f, v, err))
					}
				}
				mu.Unlock()
			}
		}(w)
	}
	for i := 0; i < 16; i++ {
		tabs := tabsB
		if i%2 == 1 {
			tabs = tabsA
		}
		if _, err := d.apply(tabs, nil); err != nil {
			t.Error(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("packets handled by neither config:\n%v", bad)
	}
	if seen["A"] == 0 || seen["B"] == 0 {
		t.Fatalf("the probes did not see both configs: %v", seen)
	}
	t.Logf("packets: %v", seen)
}

// TestConcurrentApplies has several handles apply different configs at
// once: applies serialise, and the live state is always one whole config.
func TestConcurrentApplies(t *testing.T) {
	testenv.Kernel(t)
	d, _ := loadConfigured(t)
	dir := d.Dir
	configs := [][]*table.Table{testTables(t, testConfig), testTables(t, configB)}
	want := map[string]bool{fingerprints(configs[0]): true, fingerprints(configs[1]): true}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			h, err := Open(dir)
			if err != nil {
				errs <- err
				return
			}
			defer h.Close()
			for i := 0; i < 8; i++ {
				if _, err := h.apply(configs[(w+i)%2], nil); err != nil {
					errs <- err
					return
				}
				live, err := h.Live()
				if err != nil {
					errs <- err
					return
				}
				if fp := fingerprints(Tables(live)); !want[fp] {
					errs <- fmt.Errorf("live state is no config: %s", fp)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The helper process of TestKillDuringApply: it applies the two configs in
// turn until it is killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("DIRECTOR_TEST_APPLY_LOOP"); dir != "" {
		d, err := Open(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		configs := [][]*table.Table{testTables(nil, testConfig), testTables(nil, configB)}
		fmt.Println("ready")
		for i := 0; ; i++ {
			if _, err := d.apply(configs[i%2], nil); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(4)
			}
		}
	}
	os.Exit(m.Run())
}

// TestKillDuringApply kills a process that is applying, at random points,
// with SIGKILL: the director must always be left serving one whole config,
// and the next apply must work.
func TestKillDuringApply(t *testing.T) {
	testenv.Kernel(t)
	d, dc := loadConfigured(t)
	dir := d.Dir
	configs := [][]*table.Table{testTables(t, testConfig), testTables(t, configB)}
	// Both configs in turn, so that rows list earlier primaries from the
	// first round on, however few applies a slow machine's killed
	// processes get to finish.
	for _, c := range []int{0, 1, 0} {
		if _, err := d.apply(configs[c], nil); err != nil {
			t.Fatal(err)
		}
	}
	models := map[string]*model.Datapath{}
	for _, c := range configs {
		models[fingerprints(c)] = model.New(dc, pkt.GatewayMAC, c)
	}
	frames := probeFrames()
	rng := rand.New(rand.NewPCG(1, 1))
	for round := 0; round < 12; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "DIRECTOR_TEST_APPLY_LOOP="+dir)
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		out.Read(buf) // "ready"
		time.Sleep(testenv.Scaled(time.Duration(rng.IntN(120)) * time.Millisecond))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		live, err := d.Live()
		if err != nil {
			t.Fatalf("round %d: reading live tables after kill: %v", round, err)
		}
		fp := fingerprints(Tables(live))
		if models[fp] == nil {
			t.Fatalf("round %d: after kill the live tables are neither config: %s", round, fp)
		}
		// The tables with the histories written with them: a table and
		// its history go live together, or not at all.
		m := model.New(dc, pkt.GatewayMAC, Tables(live))
		m.Histories = Histories(live)
		listed := 0
		for _, h := range m.Histories {
			if h != nil {
				listed += h.MaxHops
			}
		}
		if listed == 0 {
			t.Fatalf("round %d: no live table lists an earlier primary: the kills tested no history", round)
		}
		for _, f := range frames {
			v, o, err := testrun.Run(d.Prog, f)
			r := m.Process(f)
			if err != nil || int(v) != r.Verdict || !bytes.Equal(o, r.Out) {
				t.Fatalf("round %d: frame %x handled unlike the live config", round, f)
			}
		}
	}
	// And the director still takes applies, freeing what killed ones left.
	if _, err := d.apply(configs[1], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.apply(configs[0], nil); err != nil {
		t.Fatal(err)
	}
}

// loadConfigured loads a configured director pinned in the test's own directory.
func loadConfigured(t *testing.T) (*Director, table.DirectorConfig) {
	t.Helper()
	d, err := Load(testDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	dc := directorConfig()
	if _, err := d.applyChange(change{Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	return d, dc
}

// TestWeightsAreKeptInTheKernel: a table's weights and failure domains go
// into the kernel with it and come back in the live tables, so the same
// config planned again is no change, and a new weight is one.
func TestWeightsAreKeptInTheKernel(t *testing.T) {
	testenv.Kernel(t)
	d, _ := loadConfigured(t)
	c, err := config.Parse([]byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Tables[0]
	for i := range tc.Backends {
		tc.Backends[i].Weight = uint16(1 + 2*i)
		tc.Backends[i].Domain = fmt.Sprintf("rack-%d-%s", i%2, strings.Repeat("x", 57)) // 64 long: no NUL
	}
	tab, err := table.Build(&tc)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Commit(&Proposal{Tables: []*table.Table{tab}}, nil); err != nil {
		t.Fatal(err)
	}
	live, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range live[0].Table.Backends {
		if b.Weight != tc.Backends[i].Weight || b.Domain != tc.Backends[i].Domain {
			t.Errorf("live backend %s: weight %d in %q, applied %d in %q", b.IP, b.Weight, b.Domain, tc.Backends[i].Weight, tc.Backends[i].Domain)
		}
	}
	again, err := d.Plan(&Proposal{Tables: []*table.Table{tab}})
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed() {
		t.Errorf("the applied weighted table planned again is a change: %+v", again.Diff.Tables[0].Backends)
	}
	tc.Backends[0].Weight = 40
	heavier, err := table.Build(&tc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Plan(&Proposal{Tables: []*table.Table{heavier}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Changed() || p.Diff.Tables[0].Backends[0].Change != table.ChangeChanged {
		t.Errorf("a new weight is not a changed backend: %+v", p.Diff.Tables[0].Backends)
	}
}

// TestIPv6BackendsNeedTheirSource: a table of IPv6 backends is refused
// while the director config has no outbound_src_ip6, and nothing changes;
// with one it is served, over IPv6.
func TestIPv6BackendsNeedTheirSource(t *testing.T) {
	testenv.Kernel(t)
	d, dc := loadConfigured(t)
	tabs := testTables(t, underlay6Config)
	_, _, err := d.Commit(&Proposal{Tables: tabs}, nil)
	if err == nil || !strings.Contains(err.Error(), "tables[1]: its backends are IPv6, and the director config has no outbound_src_ip6") {
		t.Fatalf("IPv6 backends without an IPv6 source: %v", err)
	}
	if live, _ := d.Live(); len(live) != 0 {
		t.Fatalf("a refused apply left %d tables", len(live))
	}
	underlay6(&dc)
	if _, _, err := d.Commit(&Proposal{Tables: tabs, Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	live, err := d.LiveConfig()
	if err != nil || live.SrcIP6 != dc.SrcIP6 || live.Gateway6().String() != dc.Gateway6().String() {
		t.Fatalf("live config %+v, %v", live, err)
	}
}
