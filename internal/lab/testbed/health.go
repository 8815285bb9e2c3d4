package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"time"
)

// HealthPort is where ServeHealth's HTTP servers listen, on each
// backend's own address; their /health answers 200.
const HealthPort = 8080

// ServeHealth starts backend i's health endpoint (a real net/http server)
// at its table address (BackendAddr) and HealthPort.
func (tb *Testbed) ServeHealth(i int) error {
	if tb.health == nil {
		tb.health = map[int]*http.Server{}
	}
	if tb.health[i] != nil {
		return fmt.Errorf("backend%d already serves /health", i)
	}
	var ln net.Listener
	err := tb.Backends[i-1].Do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(tb.BackendAddr(i), HealthPort).String())
		return err
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	name := tb.Backends[i-1].Name
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%s ok\n", name) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	tb.health[i] = srv
	go srv.Serve(ln)
	return nil
}

// StopHealth stops backend i's health endpoint: its checks are refused.
func (tb *Testbed) StopHealth(i int) error {
	srv := tb.health[i]
	if srv == nil {
		return fmt.Errorf("backend%d serves no /health", i)
	}
	delete(tb.health, i)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Start starts cmd inside h's network namespace: a process forked from a
// thread in a namespace starts in it.
func (h *Host) Start(cmd *exec.Cmd) error { return h.Do(cmd.Start) }
