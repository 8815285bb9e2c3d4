package testbed

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/director/director/loader"
	"github.com/director/director/table"
)

func newTestbed(t *testing.T) *Testbed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the testbed needs root; CI runs it as root")
	}
	tb, err := New(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// apply makes a config live through the pinned director, as `director
// apply` does.
func apply(t *testing.T, tb *Testbed, cfg string) {
	t.Helper()
	c, err := table.ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := tb.OpenDirector()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Apply(tabs, nil); err != nil {
		t.Fatal(err)
	}
}

// session is a long-lived connection exchanging a line every 100 ms.
type session struct {
	id      int
	conn    net.Conn
	r       *bufio.Reader
	backend string // who answered first
	mu      sync.Mutex
	ok      int
	failed  int
	lastErr error
	stop    chan struct{}
	done    chan struct{}
}

func (s *session) exchange(n int) (string, error) {
	s.conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprintf(s.conn, "%d %d\n", s.id, n); err != nil {
		return "", err
	}
	line, err := s.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[1] != fmt.Sprint(s.id) || f[2] != fmt.Sprint(n) {
		return "", fmt.Errorf("bad reply %q", line)
	}
	return f[0], nil
}

func (s *session) run() {
	defer close(s.done)
	for n := 1; ; n++ {
		select {
		case <-s.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		who, err := s.exchange(n)
		s.mu.Lock()
		if err != nil {
			s.failed++
			s.lastErr = err
		} else {
			s.ok++
			if who != s.backend {
				s.failed++
				s.lastErr = fmt.Errorf("answered by %s, then %s", s.backend, who)
			}
		}
		failed := s.failed
		s.mu.Unlock()
		if failed > 0 && err != nil {
			return // the connection is gone
		}
	}
}

func open(t *testing.T, tb *Testbed, id int) *session {
	t.Helper()
	c, err := tb.Dial()
	if err != nil {
		t.Fatalf("connection %d: %v", id, err)
	}
	s := &session{id: id, conn: c, r: bufio.NewReader(c), stop: make(chan struct{}), done: make(chan struct{})}
	who, err := s.exchange(0)
	if err != nil {
		t.Fatalf("connection %d: first exchange: %v", id, err)
	}
	s.backend = who
	return s
}

func (s *session) close() {
	close(s.stop)
	<-s.done
	s.conn.Close()
}

// spread opens n short connections and counts where they land.
func spread(t *testing.T, tb *Testbed, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := 0; i < n; i++ {
		s := open(t, tb, 10000+i)
		got[s.backend]++
		s.conn.Close()
	}
	return got
}

func busiest(sessions []*session) string {
	count := map[string]int{}
	for _, s := range sessions {
		count[s.backend]++
	}
	best := ""
	for b, n := range count {
		if best == "" || n > count[best] {
			best = b
		}
	}
	return best
}

func backendIndex(name string) int {
	var i int
	fmt.Sscanf(name, "backend%d", &i)
	return i
}

// TestDrainWithoutBreakingConnections is GLB's promise, end to end: while
// long-lived connections exchange messages, a backend is drained, removed,
// added back, another goes unhealthy, and the control plane restarts.
// Connections whose backend stays in service never fail; new connections
// avoid draining and unhealthy backends and spread over the others.
func TestDrainWithoutBreakingConnections(t *testing.T) {
	tb := newTestbed(t)
	apply(t, tb, BackendConfig(nil, nil, 3))
	if got := spread(t, tb, 60); len(got) != 3 || got["backend1"] < 8 || got["backend2"] < 8 || got["backend3"] < 8 {
		t.Fatalf("60 new connections spread as %v", got)
	}
	var sessions []*session
	for i := 0; i < 24; i++ {
		s := open(t, tb, i)
		go s.run()
		sessions = append(sessions, s)
	}
	defer func() {
		for _, s := range sessions {
			if s.conn != nil {
				s.close()
			}
		}
	}()
	drained := busiest(sessions)
	x := backendIndex(drained)
	wait := func() { time.Sleep(1200 * time.Millisecond) }

	// 1. Drain x: its connections continue through second chance.
	apply(t, tb, BackendConfig(map[int]string{x: "draining"}, nil, 3))
	wait()
	if got := spread(t, tb, 30); got[drained] != 0 {
		t.Errorf("after draining %s, new connections landed on it: %v", drained, got)
	}
	// The drain completes: x's clients finish and go.
	var kept []*session
	for _, s := range sessions {
		if s.backend == drained {
			s.close()
			s.mu.Lock()
			if s.failed > 0 {
				t.Errorf("connection %d on draining %s failed: %v", s.id, drained, s.lastErr)
			}
			s.mu.Unlock()
			s.conn = nil
		} else {
			kept = append(kept, s)
		}
	}
	// 2. Remove it.
	apply(t, tb, BackendConfig(map[int]string{x: "absent"}, nil, 3))
	wait()
	// 3. Add it back.
	apply(t, tb, BackendConfig(nil, nil, 3))
	wait()
	if got := spread(t, tb, 45); got[drained] == 0 {
		t.Errorf("after adding %s back, no new connection landed on it: %v", drained, got)
	}
	// 4. Another backend becomes unhealthy: its connections continue.
	y := x%3 + 1
	apply(t, tb, BackendConfig(nil, map[int]bool{y: false}, 3))
	wait()
	if got := spread(t, tb, 30); got[fmt.Sprintf("backend%d", y)] != 0 {
		t.Errorf("new connections landed on unhealthy backend%d: %v", y, got)
	}
	// 5. The control plane exits and starts again: nothing changes.
	d, err := loader.Load(tb.BPFFS)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	apply(t, tb, BackendConfig(nil, map[int]bool{y: false}, 3))
	wait()
	apply(t, tb, BackendConfig(nil, nil, 3))
	wait()

	for _, s := range kept {
		s.close()
		s.conn = nil
		s.mu.Lock()
		if s.failed > 0 || s.ok < 40 {
			t.Errorf("connection %d on %s: %d exchanges, %d failed, last error %v", s.id, s.backend, s.ok, s.failed, s.lastErr)
		}
		s.mu.Unlock()
	}
	if got := spread(t, tb, 60); len(got) != 3 || got["backend1"] < 8 || got["backend2"] < 8 || got["backend3"] < 8 {
		t.Errorf("at the end, 60 new connections spread as %v", got)
	}
}

// TestDrainWithoutSecondChanceBreaks is the control: the same drain with
// backends that decapsulate everything and never pass a packet on (as a
// backend without GLB's proxy logic would) breaks the drained backend's
// connections. It shows the test above can fail.
func TestDrainWithoutSecondChanceBreaks(t *testing.T) {
	tb := newTestbed(t)
	for i, h := range tb.Backends {
		err := h.Do(func() error {
			b, err := loader.LoadBackend(tb.BackendBPFFS(i + 1))
			if err != nil {
				return err
			}
			defer b.Close()
			return b.DisableSecondChance(h.IP)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	apply(t, tb, BackendConfig(nil, nil, 3))
	var sessions []*session
	for i := 0; i < 18; i++ {
		s := open(t, tb, i)
		go s.run()
		sessions = append(sessions, s)
	}
	drained := busiest(sessions)
	apply(t, tb, BackendConfig(map[int]string{backendIndex(drained): "draining"}, nil, 3))
	time.Sleep(1500 * time.Millisecond)
	broken := 0
	for _, s := range sessions {
		s.close()
		s.mu.Lock()
		if s.backend == drained && s.failed > 0 {
			broken++
		}
		s.mu.Unlock()
	}
	if broken == 0 {
		t.Fatalf("draining %s without second chance broke none of its connections", drained)
	}
	t.Logf("without second chance, draining %s broke %d connections", drained, broken)
}
