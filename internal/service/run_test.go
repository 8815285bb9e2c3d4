package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/director/director/internal/testenv"
	"github.com/director/director/loader"
)

// TestRunEmptyConfig: GLB's packaged default, {"tables": []}, is served
// (nothing is steered until tables arrive); a second run on the same pins
// is refused while the first runs; the first stops when asked and leaves
// the pins; a bad config is refused before anything is touched.
func TestRunEmptyConfig(t *testing.T) {
	testenv.Kernel(t)
	dir := filepath.Join("/sys/fs/bpf", "director-svc-"+filepath.Base(t.TempDir()))
	t.Cleanup(func() { loader.Unload(dir) })
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "forwarding_table.src.json")
	if err := os.WriteFile(cfg, []byte(`{"tables": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	opts := func(ready func(string)) Options {
		return Options{Config: cfg, BPFFS: dir, LockDir: tmp, Ready: ready, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts(func(s string) { ready <- s })) }()
	select {
	case s := <-ready:
		if !strings.Contains(s, "serving 0 tables") {
			t.Errorf("status %q", s)
		}
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if !strings.Contains(logs.String(), "passes every packet") {
		t.Errorf("no warning about the empty config:\n%s", logs.String())
	}
	err := Run(context.Background(), Options{Config: cfg, BPFFS: dir, LockDir: tmp, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "already serves") || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Errorf("a second run: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d, err := loader.Open(dir)
	if err != nil {
		t.Fatalf("the pins after stopping: %v", err)
	}
	live, err := d.Live()
	d.Close()
	if err != nil || len(live) != 0 {
		t.Fatalf("live after an empty config: %v %d tables", err, len(live))
	}
	bad := filepath.Join(tmp, "bad.json")
	os.WriteFile(bad, []byte(`{"tables": [{"name": "x"}]}`), 0o600)
	err = Run(context.Background(), Options{Config: bad, BPFFS: dir + "-never", LockDir: tmp, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "tables[0].hash_key") {
		t.Fatalf("a bad config: %v", err)
	}
	if _, err := os.Stat(dir + "-never"); !os.IsNotExist(err) {
		t.Fatal("a bad config touched the pins")
	}
}

// syncBuffer is a log sink the test may read while the service writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
