package service

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestConnLimitLetsAScrapeThroughIdlers: with the server's connections
// full of clients that never send a request, a scrape still gets its
// answer at once, and the server never holds more than its limit.
func TestConnLimitLetsAScrapeThroughIdlers(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &connLimit{Listener: ln, max: 8, conns: map[net.Conn]*connState{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Minute, ConnState: cl.track,
		ErrorLog: slog.NewLogLogger(slog.New(slog.NewTextHandler(io.Discard, nil)).Handler(), slog.LevelError)}
	go srv.Serve(cl)
	defer srv.Close()
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < 200; i++ {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	time.Sleep(100 * time.Millisecond) // the server accepts them all
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < 5; i++ {
		start := time.Now()
		resp, err := client.Get("http://" + ln.Addr().String() + "/metrics")
		if err != nil {
			t.Fatalf("scrape %d among 200 idle connections: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" || time.Since(start) > time.Second {
			t.Fatalf("scrape %d: %q in %v", i, body, time.Since(start))
		}
	}
	cl.mu.Lock()
	n := len(cl.conns)
	cl.mu.Unlock()
	if n > cl.max {
		t.Fatalf("%d connections open, limit %d", n, cl.max)
	}
}
