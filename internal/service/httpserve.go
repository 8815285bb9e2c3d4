package service

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// The metrics server's limits: a scraper that connects and says nothing,
// or keeps a connection idle, or reads slowly, is cut off, and at most
// maxMetricsConns connections are open at once, so that no number of
// clients can take the descriptors the checks and config reads need.
const (
	maxMetricsConns      = 64
	metricsHeaderTimeout = 5 * time.Second
	metricsReadTimeout   = 10 * time.Second
	metricsWriteTimeout  = 30 * time.Second
	metricsIdleTimeout   = 30 * time.Second
)

// serveHTTP serves h on ln within the limits above, until the returned
// server is closed.
func serveHTTP(ln net.Listener, h http.Handler, log *slog.Logger) *http.Server {
	cl := &connLimit{Listener: ln, max: maxMetricsConns, conns: map[net.Conn]*connState{}}
	srv := &http.Server{Handler: h,
		ReadHeaderTimeout: metricsHeaderTimeout, ReadTimeout: metricsReadTimeout,
		WriteTimeout: metricsWriteTimeout, IdleTimeout: metricsIdleTimeout,
		ConnState: cl.track,
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelError)}
	go srv.Serve(cl)
	return srv
}

// connLimit is a listener that keeps at most max connections open: when a
// new one would be one too many, it closes the one that has waited longest
// without a request under way (new, or idle between requests), and if every
// one has a request under way, the new one. A flood of idle connections so
// never keeps a scrape out: each newcomer pushes out the oldest idler.
type connLimit struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connState
}

type connState struct {
	busy  bool // a request is under way
	since time.Time
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// admit makes room for c, if there is an idle connection to close.
func (l *connLimit) admit(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		var victim net.Conn
		var oldest time.Time
		for vc, st := range l.conns {
			if !st.busy && (victim == nil || st.since.Before(oldest)) {
				victim, oldest = vc, st.since
			}
		}
		if victim == nil {
			return false
		}
		victim.Close()
		delete(l.conns, victim)
	}
	l.conns[c] = &connState{since: time.Now()}
	return true
}

// track follows the server's view of each connection.
func (l *connLimit) track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	case http.StateActive:
		if st := l.conns[c]; st != nil {
			st.busy = true
		}
	case http.StateIdle:
		if st := l.conns[c]; st != nil {
			st.busy, st.since = false, time.Now()
		}
	}
}
