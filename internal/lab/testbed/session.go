package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/director/director/internal/lab/testenv"
)

// Session is a long-lived client connection through the VIP that exchanges
// a line every 100 ms and checks each answer: TCP (Open) or a QUIC
// stream (OpenQUIC).
type Session struct {
	ID      int
	Backend string // the backend that answered first
	conn    stream
	quic    *quicClient // a QUIC session's connection, nil for TCP
	r       *bufio.Reader
	mu      sync.Mutex
	ok      int
	failed  int
	lastErr error
	stop    chan struct{}
	done    chan struct{}
	running bool
	lastOK  time.Time
	maxGap  time.Duration // the longest time between two exchanges that worked
	// firstFail is when an exchange first failed (zero: none did).
	firstFail time.Time
	// Patient sessions give an exchange four seconds, not one: for tests
	// many connections load (TestHistoryChurn), where a lost segment
	// retransmitted late is not a broken connection. Set before Start.
	Patient bool
}

// Open connects and does a first exchange, which names the backend.
func (tb *Testbed) Open(id int) (*Session, error) { return tb.OpenFrom(id, netip.Addr{}) }

// OpenFrom is Open from the client's address src (any when not valid).
// With the IPv6 underlay, odd ids go to VIP6 (vipFor).
func (tb *Testbed) OpenFrom(id int, src netip.Addr) (*Session, error) {
	c, err := tb.DialTo(src, tb.vipFor(id))
	if err != nil {
		return nil, fmt.Errorf("connection %d: %w", id, err)
	}
	s := &Session{ID: id, conn: c, r: bufio.NewReader(c), stop: make(chan struct{}), done: make(chan struct{})}
	who, err := s.exchange(0)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("connection %d: first exchange: %w", id, err)
	}
	s.Backend = who
	return s, nil
}

// stream is what a session exchanges lines over: a TCP connection or a
// QUIC stream.
type stream interface {
	io.ReadWriteCloser
	SetDeadline(time.Time) error
}

// exchangeTimeout is how long an exchange may take: a second for TCP
// (a segment lost waits for a retransmission), two for QUIC (a packet lost
// while a path is validated waits for a probe timeout); an emulated guest
// stretches both.
func (s *Session) exchangeTimeout() time.Duration {
	if s.Patient {
		return testenv.Scaled(4 * time.Second)
	}
	if s.quic != nil {
		return testenv.Scaled(2 * time.Second)
	}
	return testenv.Scaled(time.Second)
}

// Reset reports whether the session ended because its connection was
// reset or closed: what a connection a backend does not know gets, as
// against an exchange that only took too long.
func (s *Session) Reset() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr != nil && (errors.Is(s.lastErr, syscall.ECONNRESET) || errors.Is(s.lastErr, io.EOF) ||
		errors.Is(s.lastErr, syscall.EPIPE))
}

func (s *Session) exchange(n int) (string, error) {
	s.conn.SetDeadline(time.Now().Add(s.exchangeTimeout()))
	if _, err := fmt.Fprintf(s.conn, "%d %d\n", s.ID, n); err != nil {
		return "", err
	}
	line, err := s.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[1] != fmt.Sprint(s.ID) || f[2] != fmt.Sprint(n) {
		return "", fmt.Errorf("bad reply %q", line)
	}
	return f[0], nil
}

// Start exchanges a line every 100 ms until Stop.
func (s *Session) Start() {
	s.running = true
	go func() {
		defer close(s.done)
		for n := 1; ; n++ {
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			who, err := s.exchange(n)
			s.mu.Lock()
			if (err != nil || who != s.Backend) && s.firstFail.IsZero() {
				s.firstFail = time.Now()
			}
			switch {
			case err != nil:
				s.failed++
				s.lastErr = err
			case who != s.Backend:
				s.failed++
				s.lastErr = fmt.Errorf("answered by %s, then by %s", s.Backend, who)
			default:
				s.ok++
				now := time.Now()
				if !s.lastOK.IsZero() && now.Sub(s.lastOK) > s.maxGap {
					s.maxGap = now.Sub(s.lastOK)
				}
				s.lastOK = now
			}
			s.mu.Unlock()
			if err != nil {
				return // the connection is gone
			}
		}
	}()
}

// Stop ends the exchanges and closes the connection.
func (s *Session) Stop() {
	if s.running {
		close(s.stop)
		<-s.done
		s.running = false
	}
	s.conn.Close()
}

// MaxGap is the longest time between two exchanges that worked: about
// 100 ms when nothing stalls.
func (s *Session) MaxGap() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxGap
}

// FirstFail is when an exchange of the session first failed; zero if none
// did.
func (s *Session) FirstFail() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstFail
}

// Local is the client's end of a TCP session: what the director hashes.
func (s *Session) Local() netip.AddrPort {
	if c, ok := s.conn.(interface{ LocalAddr() net.Addr }); ok {
		if a, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil {
			return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		}
	}
	return netip.AddrPort{}
}

// Result is how the session went: exchanges that worked and that failed.
func (s *Session) Result() (ok, failed int, lastErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok, s.failed, s.lastErr
}

// Spread opens n short connections and counts which backend each landed on.
func (tb *Testbed) Spread(n int) (map[string]int, error) {
	got := map[string]int{}
	for i := 0; i < n; i++ {
		s, err := tb.Open(100000 + i)
		if err != nil {
			return got, err
		}
		got[s.Backend]++
		s.Stop()
	}
	return got, nil
}

// Busiest is the backend most sessions are on.
func Busiest(sessions []*Session) string {
	count := map[string]int{}
	best := ""
	for _, s := range sessions {
		count[s.Backend]++
		if best == "" || count[s.Backend] > count[best] || (count[s.Backend] == count[best] && s.Backend < best) {
			best = s.Backend
		}
	}
	return best
}

// BackendIndex is the number in a backend's name.
func BackendIndex(name string) int {
	var i int
	fmt.Sscanf(name, "backend%d", &i)
	return i
}
