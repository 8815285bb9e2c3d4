package testbed

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/table"
)

// churnBackend is a backend of the churn tests' table as an edit leaves it.
type churnBackend struct {
	state  string // active, draining, absent
	weight int
}

// churnConfig is the testbed's table of six backends as bs has them, the
// table's history settings given by extra.
func churnConfig(tb *Testbed, bs []churnBackend, extra string) string {
	var out []string
	for i, b := range bs {
		if b.state == "absent" {
			continue
		}
		out = append(out, fmt.Sprintf(`{"ip": "%s", "state": "%s", "healthy": true, "weight": %d}`, tb.BackendAddr(i+1), b.state, b.weight))
	}
	return `{"tables": [{"name": "vip", "hash_key": "0f0e0d0c0b0a09080706050403020100", "seed": "00112233445566778899aabbccddeeff", ` +
		extra + `"binds": [` + binds([]netip.Addr{VIP}) + `], "backends": [` + strings.Join(out, ", ") + `]}]}`
}

// churnEdits is a seeded random sequence of n edits of the kinds an
// operator makes (drain, undrain, remove, add back, weights up and down by
// 20 to 40%), three of them two edits at once, keeping at least three
// backends active: the config after each.
func churnEdits(rng *rand.Rand, n int) (configs [][]churnBackend, what []string) {
	bs := churnStart()
	doubles := map[int]bool{}
	for len(doubles) < 3 {
		doubles[rng.IntN(n)] = true
	}
	active := func() int {
		k := 0
		for _, b := range bs {
			if b.state == "active" {
				k++
			}
		}
		return k
	}
	one := func(avoid int) (string, int) {
		for {
			i := rng.IntN(len(bs))
			if i == avoid {
				continue
			}
			b := &bs[i]
			switch k := rng.IntN(5); {
			case k == 0 && b.state == "active" && active() > 3:
				b.state = "draining"
				return fmt.Sprintf("drain %d", i+1), i
			case k == 1 && b.state == "draining":
				b.state = "active"
				return fmt.Sprintf("undrain %d", i+1), i
			case k == 2 && b.state != "absent" && (b.state != "active" || active() > 3):
				b.state = "absent"
				return fmt.Sprintf("remove %d", i+1), i
			case k == 3 && b.state == "absent":
				b.state, b.weight = "active", 1000
				return fmt.Sprintf("add back %d", i+1), i
			case k == 4 && b.state == "active":
				f := 0.2 + 0.2*rng.Float64()
				if rng.IntN(2) == 0 {
					f = -f
				}
				b.weight = max(1, int(float64(b.weight)*(1+f)))
				return fmt.Sprintf("weight %d %+.0f%% to %d", i+1, 100*f, b.weight), i
			}
		}
	}
	for e := range n {
		w, i := one(-1)
		if doubles[e] {
			w2, _ := one(i)
			w += " and " + w2
		}
		configs = append(configs, slices.Clone(bs))
		what = append(what, w)
	}
	return configs, what
}

// churnSetup is the churn tests' testbed of six backends and their
// sixteen random edits, from a seed it prints.
func churnSetup(t *testing.T) (*Testbed, [][]churnBackend, []string) {
	t.Helper()
	testenv.Kernel(t)
	seed := churnSeed(t)
	t.Logf("seed %d (DIRECTOR_CHURN_SEED=%d runs it again)", seed, seed)
	configs, what := churnEdits(rand.New(rand.NewPCG(seed, 45)), 16)
	tb, err := New(Options{Backends: 6, Underlay6: false})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb, configs, what
}

// churnStart is the churn tests' first config: six active backends.
func churnStart() []churnBackend {
	bs := make([]churnBackend, 6)
	for i := range bs {
		bs[i] = churnBackend{"active", 1000}
	}
	return bs
}

// churnSeed is the run's seed: DIRECTOR_CHURN_SEED when set, else another
// each run. It is printed, so a failure can be run again.
func churnSeed(t *testing.T) uint64 {
	if s := os.Getenv("DIRECTOR_CHURN_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// churnInterval is the time between the churn tests' edits: 8 s on every
// machine, an emulated guest included, where what an edit waits for is
// scaled instead (its apply, testenv.Scaled): the time between edits is
// the test's load, not a bound on the service.
const churnInterval = 8 * time.Second

// churnTraffic is the churn tests' clients: long-lived connections, each
// exchanging a line every 100 ms, and a new connection every second,
// which exchanges a few lines and closes.
type churnTraffic struct {
	long      []*Session
	stop      chan struct{}
	wg        sync.WaitGroup
	made      atomic.Int64
	newFailed atomic.Int64
	newErr    atomic.Value
}

func startChurnTraffic(t *testing.T, tb *Testbed, n int) *churnTraffic {
	t.Helper()
	c := &churnTraffic{stop: make(chan struct{})}
	for i := range n {
		s := open(t, tb, i)
		s.Patient = true
		s.Start()
		c.long = append(c.long, s)
	}
	t.Cleanup(func() {
		for _, s := range c.long {
			s.Stop()
		}
	})
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for id := n; ; id++ {
			select {
			case <-c.stop:
				return
			case <-time.After(time.Second):
			}
			c.made.Add(1)
			s, err := tb.Open(id)
			if err == nil {
				s.Patient = true
				for k := 1; k <= 3 && err == nil; k++ {
					_, err = s.exchange(k)
				}
				s.conn.Close()
			}
			if err != nil {
				c.newFailed.Add(1)
				c.newErr.Store(err)
			}
		}
	}()
	t.Cleanup(c.end)
	return c
}

func (c *churnTraffic) end() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
}

// broken are the long-lived sessions that failed an exchange.
func (c *churnTraffic) broken() []*Session {
	var out []*Session
	for _, s := range c.long {
		if ok, failed, _ := s.Result(); failed > 0 || ok == 0 {
			out = append(out, s)
		}
	}
	return out
}

// TestHistoryChurn is the proof with real connections: six
// backends whose processes never stop, 48 long-lived connections and a new
// one every second, sixteen random edits 8 s apart through 'director run'
// with its defaults (history in the packets). Every edit is live within
// 5 s, no connection breaks and no new one fails. The seed is printed.
func TestHistoryChurn(t *testing.T) {
	tb, configs, what := churnSetup(t)
	start := churnStart()
	path := filepath.Join(t.TempDir(), "forwarding_table.src.json")
	writeConfig(t, path, churnConfig(tb, start, ""))
	p := startRun(t, tb, path)
	traffic := startChurnTraffic(t, tb, 48)
	for e, cfg := range configs {
		time.Sleep(churnInterval)
		body := churnConfig(tb, cfg, "")
		mark := p.Mark()
		writeConfig(t, path, body)
		took := waitFingerprint(t, tb, fingerprintOf(t, body), 5*time.Second, fmt.Sprintf("edit %d (%s)", e+1, what[e]))
		if n := p.CountSince(mark, Msg("UNSAFE config edit held: what is live keeps serving, and the edit is tried again every check interval and applied once it is safe; review it with 'director plan' and apply it with "+
			"'director apply --allow-unsafe' if it is what you want now")); n > 0 {
			t.Errorf("edit %d (%s) was held", e+1, what[e])
		}
		t.Logf("edit %d (%s): live in %v", e+1, what[e], took.Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second) // the last edit's traffic
	traffic.end()
	for _, s := range traffic.broken() {
		_, _, err := s.Result()
		t.Errorf("connection %d to %s broke at %v: %v", s.ID, s.Backend, s.FirstFail().Format(time.TimeOnly), err)
	}
	if n := traffic.newFailed.Load(); n > 0 {
		t.Errorf("%d of %d new connections failed: %v", n, traffic.made.Load(), traffic.newErr.Load())
	}
	t.Logf("%d long-lived connections, %d new ones, through %d edits", len(traffic.long), traffic.made.Load(), len(configs))
}

// TestHistoryChurnControl is TestHistoryChurn's control, for the
// verdict's calibration: the same kind of sequence with the earlier
// primaries out of the packets (history_hops false), each edit planned and
// applied by hand, unsafe or not, through the one path to the kernel.
// Connections break, and every broken one's row is among the rows its
// edit's plan counted at risk.
func TestHistoryChurnControl(t *testing.T) {
	tb, configs, what := churnSetup(t)
	const twoHops = `"history_hops": false, `
	start := churnStart()
	apply(t, tb, churnConfig(tb, start, twoHops))
	traffic := startChurnTraffic(t, tb, 48)
	type applied struct {
		at     time.Time
		atRisk []bool
		count  int
	}
	var edits []applied
	for e, cfg := range configs {
		time.Sleep(churnInterval)
		// The edit's time is when its apply began: the flip, and the
		// first packet it strands, come before the apply returns.
		began := time.Now()
		risk, n := applyByHand(t, tb, churnConfig(tb, cfg, twoHops))
		edits = append(edits, applied{began, risk, n})
		t.Logf("edit %d (%s): %d rows at risk", e+1, what[e], n)
	}
	time.Sleep(2 * time.Second)
	traffic.end()
	var key table.Key
	if _, err := hex.Decode(key[:], []byte("0f0e0d0c0b0a09080706050403020100")); err != nil {
		t.Fatal(err)
	}
	dc := tb.DirectorConfig()
	// A connection a change broke is reset (its packets reached a
	// backend that does not know it); one that only stalled under load
	// says nothing of the verdict.
	var broken []*Session
	for _, s := range traffic.broken() {
		if s.Reset() {
			broken = append(broken, s)
		} else {
			_, _, err := s.Result()
			t.Logf("connection %d stalled, not reset: %v", s.ID, err)
		}
	}
	for _, s := range broken {
		local := s.Local()
		row := int(model.FlowHash(key, model.Flow{Client: local.Addr(), ClientPort: local.Port(), VIP: VIP, VIPPort: 80, Proto: 6},
			dc.HashFields) & (table.Rows - 1))
		when := s.FirstFail()
		e := len(edits) - 1
		for e > 0 && edits[e].at.After(when) {
			e--
		}
		if edits[e].atRisk == nil || !edits[e].atRisk[row] {
			_, _, err := s.Result()
			t.Errorf("connection %d (row %#x, on %s) broke %v after edit %d (%s), whose plan did not count its row at risk: %v",
				s.ID, row, s.Backend, when.Sub(edits[e].at).Round(time.Millisecond), e+1, what[e], err)
		}
	}
	total := 0
	for _, e := range edits {
		total += e.count
	}
	if len(broken) == 0 {
		t.Errorf("no connection broke with two hops: the control shows nothing (%d rows were counted at risk in all)", total)
	}
	t.Logf("%d of %d connections broke, each on a row its edit counted at risk", len(broken), len(traffic.long))
}

// applyByHand plans cfg against what is live and applies it whatever the
// verdict, as 'director apply --allow-unsafe' does, and returns the rows
// the plan counted at risk.
func applyByHand(t *testing.T, tb *Testbed, cfg string) ([]bool, int) {
	t.Helper()
	var risk []bool
	var n int
	commit(t, tb, cfg, func(plan *table.Plan) error {
		risk, n = plan.Diff.Tables[0].RowsAtRisk, plan.Diff.Tables[0].Rows.AtRisk
		return nil
	})
	return risk, n
}

// TestHistoryTwoEdits is the first case: four backends at weight
// 1000 and 96 long-lived connections; backend 2 raised to 3000, then,
// 3 s later, backend 5 added at 3000. Each edit alone is safe. With
// history in the packets ('director run', its defaults) none of the 96
// breaks; with two hops (history_hops false, each edit applied by hand
// whatever its verdict) the second edit strands the first one's earlier
// primaries, and connections are reset: 8 to 15 of the 96 when the issue
// was filed.
func TestHistoryTwoEdits(t *testing.T) {
	testenv.Kernel(t)
	start := []churnBackend{{"active", 1000}, {"active", 1000}, {"active", 1000}, {"active", 1000}, {"absent", 1000}}
	raised := slices.Clone(start)
	raised[1].weight = 3000
	added := slices.Clone(raised)
	added[4] = churnBackend{"active", 3000}
	edits := [][]churnBackend{raised, added}
	run := func(t *testing.T, extra string, edit func(tb *Testbed, cfg string)) []*Session {
		tb, err := New(Options{Backends: 5, Underlay6: false})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tb.Close() })
		edit(tb, churnConfig(tb, start, extra))
		traffic := startChurnTraffic(t, tb, 96)
		for _, bs := range edits {
			time.Sleep(3 * time.Second)
			edit(tb, churnConfig(tb, bs, extra))
		}
		time.Sleep(2 * time.Second)
		traffic.end()
		if n := traffic.newFailed.Load(); n > 0 {
			t.Errorf("%d of %d new connections failed: %v", n, traffic.made.Load(), traffic.newErr.Load())
		}
		return traffic.broken()
	}
	t.Run("history", func(t *testing.T) {
		var path string
		var p *Service
		broken := run(t, "", func(tb *Testbed, cfg string) {
			if p == nil {
				path = filepath.Join(t.TempDir(), "forwarding_table.src.json")
				writeConfig(t, path, cfg)
				p = startRun(t, tb, path)
				return
			}
			writeConfig(t, path, cfg)
			waitFingerprint(t, tb, fingerprintOf(t, cfg), 5*time.Second, "the edit")
		})
		for _, s := range broken {
			_, _, err := s.Result()
			t.Errorf("connection %d to %s broke at %v: %v", s.ID, s.Backend, s.FirstFail().Format(time.TimeOnly), err)
		}
	})
	t.Run("two hops", func(t *testing.T) {
		first := true
		broken := run(t, `"history_hops": false, `, func(tb *Testbed, cfg string) {
			if first {
				first = false
				apply(t, tb, cfg)
				return
			}
			applyByHand(t, tb, cfg)
		})
		reset := 0
		for _, s := range broken {
			if s.Reset() {
				reset++
			}
		}
		if reset == 0 {
			t.Errorf("no connection was reset with two hops (%d stalled): the case shows nothing", len(broken))
		}
		t.Logf("with two hops %d of 96 connections were reset", reset)
	})
}
