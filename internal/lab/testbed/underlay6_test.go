package testbed

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
)

// TestRunIPv6Underlay is 'director run' over the IPv6 underlay: its
// http checks reach the backends' IPv6 addresses, and its gue checks are
// ICMPv6 echo requests in GUE over IPv6, decapsulated by the backend
// program and answered by the backend's stack. Each kind takes a backend
// down and back, while connections through both VIPs to the other
// backends carry on.
func TestRunIPv6Underlay(t *testing.T) {
	testenv.Kernel(t)
	tb := newBedFor(t, true)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeHealth(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "forwarding_table.src.json")
	writeConfig(t, cfg, tb.CheckedConfig(nil, interval, trigger))
	allUp := fingerprintOf(t, tb.Config(nil, nil))
	p := startRun(t, tb, cfg)
	waitFingerprint(t, tb, allUp, interval*(trigger+1), "the checks' first round")

	t.Run("http check", func(t *testing.T) {
		sessions := started(t, tb, 0, 12)
		if err := tb.StopHealth(1); err != nil {
			t.Fatal(err)
		}
		waitFingerprint(t, tb, fingerprintOf(t, tb.Config(nil, map[int]bool{1: false})), interval*trigger+interval, "backend1's server stopped")
		if got := spread(t, tb, 30); got["backend1"] != 0 {
			t.Errorf("new connections still reach backend1: %v", got)
		}
		for _, s := range sessions {
			if ok, failed, err := s.Result(); s.Backend != "backend1" && (failed != 0 || ok == 0) {
				t.Errorf("connection %d to %s (VIP %s): %d ok, %d failed: %v", s.ID, s.Backend, tb.vipFor(s.ID), ok, failed, err)
			}
		}
		if _, ok := p.WaitLog(0, func(m map[string]any) bool {
			return m["msg"] == "applied" && strings.Contains(fmt.Sprint(m["changes"]), "vip/fd50::11: down (checks: http failed: refused")
		}, testenv.Scaled(interval)); !ok {
			t.Error("no apply record names fd50::11 going down and why")
		}
		if err := tb.ServeHealth(1); err != nil {
			t.Fatal(err)
		}
		waitFingerprint(t, tb, allUp, interval*(trigger+2), "backend1's server back")
	})

	t.Run("gue check", func(t *testing.T) {
		m := scrape(t, tb)
		if value(t, m, "director_check_up", "backend", "fd50::12", "check", "gue") != 1 {
			t.Fatal("the gue check of fd50::12 does not pass while its program decapsulates")
		}
		// backend2's server still answers, but GUE over IPv6 is no
		// longer decapsulated: its echo requests go unanswered.
		setProgram(t, tb, 2, false)
		waitFingerprint(t, tb, fingerprintOf(t, tb.Config(nil, map[int]bool{2: false})), interval*(trigger+1)+200*time.Millisecond, "backend2's program detached")
		// Each gauge is its check's last result: on a loaded guest one
		// round's HTTP check may time out, so the state is looked for over
		// a few rounds rather than in one scrape.
		var gue, http float64
		for deadline := time.Now().Add(testenv.Scaled(3 * interval)); ; {
			m = scrape(t, tb)
			gue = value(t, m, "director_check_up", "backend", "fd50::12", "check", "gue")
			http = value(t, m, "director_check_up", "backend", "fd50::12", "check", "http")
			if gue == 0 && http == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("the gue check should fail and the http check pass: gue %v, http %v", gue, http)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		setProgram(t, tb, 2, true)
		waitFingerprint(t, tb, allUp, interval*(trigger+2), "backend2's program back")
	})
}

// setProgram attaches or detaches backend i's program.
func setProgram(t *testing.T, tb *Testbed, i int, attached bool) {
	t.Helper()
	err := tb.Backends[i-1].Do(func() error {
		b, err := loader.OpenBackend(tb.BackendBPFFS(i))
		if err != nil {
			return err
		}
		defer b.Close()
		if !attached {
			return b.Detach("eth0")
		}
		_, err = b.Attach("eth0", loader.ModeNative)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
