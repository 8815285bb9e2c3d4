package daemon

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// The metrics server's limits: a scraper that connects and says nothing,
// or keeps a connection idle, or reads slowly, is cut off (and pushed out
// sooner by newcomers when the connections are full, see connLimit), and at most
// maxMetricsConns connections are open at once, so that no number of
// clients can take the descriptors the checks and config reads need.
const (
	maxMetricsConns      = 64
	metricsHeaderTimeout = 5 * time.Second
	metricsReadTimeout   = 10 * time.Second
	metricsWriteTimeout  = 30 * time.Second
	metricsIdleTimeout   = 30 * time.Second
)

// ServeHTTP serves h on ln within the limits above, until the returned
// server is closed.
func ServeHTTP(ln net.Listener, h http.Handler, log *slog.Logger) *http.Server {
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
// one has a request under way, the one whose request began longest ago. A
// flood of idle connections, or of requests read slowly, so never keeps a
// scrape out: each newcomer pushes out the oldest, and a scrape takes
// milliseconds, not the seconds a slow reader holds on for.
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

// admit makes room for c: the newcomer always gets in.
func (l *connLimit) admit(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		var victim net.Conn
		var vs *connState
		for vc, st := range l.conns {
			if vs == nil || (!st.busy && vs.busy) || (st.busy == vs.busy && st.since.Before(vs.since)) {
				victim, vs = vc, st
			}
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
			st.busy, st.since = true, time.Now()
		}
	case http.StateIdle:
		if st := l.conns[c]; st != nil {
			st.busy, st.since = false, time.Now()
		}
	}
}
