package daemon

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
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

// TestConnLimitLetsAScrapeThroughSlowReaders: with every connection busy
// with a request whose answer its client never reads (more than the
// sockets buffer, so none ends), a scrape still gets its answer.
func TestConnLimitLetsAScrapeThroughSlowReaders(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &connLimit{Listener: ln, max: 8, conns: map[net.Conn]*connState{}}
	big := strings.Repeat("x", 64<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "ok")
	}), ConnState: cl.track, ErrorLog: slog.NewLogLogger(slog.New(slog.NewTextHandler(io.Discard, nil)).Handler(), slog.LevelError)}
	go srv.Serve(cl)
	defer srv.Close()
	var slow []net.Conn
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	for i := 0; i < cl.max; i++ {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
		slow = append(slow, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for busy := 0; busy < cl.max; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d connections busy", busy, cl.max)
		}
		time.Sleep(10 * time.Millisecond)
		cl.mu.Lock()
		busy = 0
		for _, st := range cl.conns {
			if st.busy {
				busy++
			}
		}
		cl.mu.Unlock()
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; i < 3; i++ {
		resp, err := client.Get("http://" + ln.Addr().String() + "/metrics")
		if err != nil {
			t.Fatalf("scrape %d among %d slow readers: %v", i, cl.max, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" {
			t.Fatalf("scrape %d: %q", i, body)
		}
	}
}
