package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/table"
)

// MetricsAddr is where Service's director run serves /metrics, inside the
// director's namespace.
const MetricsAddr = "127.0.0.1:9464"

// CheckedConfig is the testbed's table with health left to the checks (no
// "healthy"): HTTP on each backend's /health and GUE through its
// decapsulating program, every interval, trigger results in a row.
func CheckedConfig(states map[int]string, n int, interval time.Duration, trigger int) string {
	return checkedConfigOf(states, n, interval, trigger, BackendIP, VIP)
}

// CheckedConfig is the package's CheckedConfig for this testbed, as
// Config is BackendConfig.
func (tb *Testbed) CheckedConfig(states map[int]string, interval time.Duration, trigger int) string {
	if !tb.Underlay6 {
		return CheckedConfig(states, len(tb.Backends), interval, trigger)
	}
	return checkedConfigOf(states, len(tb.Backends), interval, trigger, BackendIP6, VIP, VIP6)
}

func checkedConfigOf(states map[int]string, n int, interval time.Duration, trigger int, addr func(int) netip.Addr, vips ...netip.Addr) string {
	var bs []string
	for i := 1; i <= n; i++ {
		st, ok := states[i]
		if !ok {
			st = "active"
		}
		if st == "absent" {
			continue
		}
		bs = append(bs, fmt.Sprintf(`{"ip": "%s", "state": "%s", "healthchecks": {"http": %d, "http_uri": "/health", "gue": 19523}}`,
			addr(i), st, HealthPort))
	}
	// Checks time out after 200 ms; in the emulated guests, where an
	// answer under load takes up to 200 ms itself, as long as the interval
	// allows.
	timeout := min(testenv.Scaled(200*time.Millisecond), max(interval, 200*time.Millisecond))
	return fmt.Sprintf(`{"healthchecks": {"interval_ms": %d, "timeout_ms": %d, "trigger": %d},
 "tables": [{"name": "vip", "hash_key": "0f0e0d0c0b0a09080706050403020100", "seed": "00112233445566778899aabbccddeeff",
  "binds": [%s],
  "backends": [%s]}]}`, interval.Milliseconds(), timeout.Milliseconds(), trigger, binds(vips), strings.Join(bs, ", "))
}

// LiveFingerprint is the live table's fingerprint, read from the kernel.
func (tb *Testbed) LiveFingerprint() (string, error) {
	d, err := tb.OpenDirector()
	if err != nil {
		return "", err
	}
	defer d.Close()
	live, err := d.LiveState()
	if err != nil {
		return "", err
	}
	if len(live.Tables) != 1 {
		return fmt.Sprintf("%d tables", len(live.Tables)), nil
	}
	return table.Fingerprint(live.Tables[0]), nil
}

// Service is 'director run' running as a process in the director's
// namespace, as systemd would run it: with a notify socket, its JSON log
// collected.
type Service struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	logs  []map[string]any
	raw   []string
	ready chan string // sd_notify messages
	done  chan struct{}
	sock  *net.UnixConn
	err   error
}

// StartService starts bin's 'director run' with config cfg, attached to
// the director's eth0 and serving metrics at MetricsAddr; dir holds its
// notify socket. It does not wait for it to be ready (Ready does).
func (tb *Testbed) StartService(bin, dir, cfg string, extra ...string) (*Service, error) {
	return StartService(tb.Director, tb.BPFFS, bin, dir, cfg, extra...)
}

// StartService is Testbed.StartService for the director on host h, its
// pins in bpffs.
func StartService(h *Host, bpffs, bin, dir, cfg string, extra ...string) (*Service, error) {
	return StartServiceLimited(h, bpffs, 0, bin, dir, cfg, extra...)
}

// StartServiceLimited is StartService with at most nofile descriptors
// (soft and hard limit; 0: this process's), as a host whose limits are
// tight would run it.
func StartServiceLimited(h *Host, bpffs string, nofile int, bin, dir, cfg string, extra ...string) (*Service, error) {
	args := append([]string{"run", "--bpffs", bpffs, "--config", cfg, "--attach", "eth0", "--mode", "native",
		"--metrics", MetricsAddr, "--log-format", "json"}, extra...)
	s := &Service{cmd: exec.Command(bin, args...), done: make(chan struct{}), ready: make(chan string, 8)}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("notify-%d", time.Now().UnixNano()))
	if s.sock, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"}); err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := s.sock.Read(buf)
			if err != nil {
				return
			}
			select {
			case s.ready <- string(buf[:n]):
			default:
			}
		}
	}()
	s.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+path)
	if err := h.Start(s.cmd); err != nil {
		s.sock.Close()
		return nil, err
	}
	if nofile > 0 {
		// Soft and hard: the Go runtime raises its soft limit to the hard
		// one as it starts, before or after this, to the same end.
		lim := unix.Rlimit{Cur: uint64(nofile), Max: uint64(nofile)}
		if err := unix.Prlimit(s.cmd.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
			s.cmd.Process.Kill()
			return nil, fmt.Errorf("prlimit: %w", err)
		}
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			json.Unmarshal(sc.Bytes(), &m)
			s.mu.Lock()
			s.raw = append(s.raw, sc.Text())
			if m != nil {
				s.logs = append(s.logs, m)
			}
			s.mu.Unlock()
		}
		s.err = s.cmd.Wait()
		s.sock.Close()
		close(s.done)
	}()
	return s, nil
}

// Ready waits for the service's READY=1 (sent after its first apply and
// attach).
func (s *Service) Ready(within time.Duration) error {
	select {
	case n := <-s.ready:
		if !strings.Contains(n, "READY=1") {
			return fmt.Errorf("first notification %q is not READY=1", n)
		}
		return nil
	case <-s.done:
		return fmt.Errorf("director run exited: %v", s.err)
	case <-time.After(within):
		return fmt.Errorf("director run sent no READY=1 in %v", within)
	}
}

// PID is the process's.
func (s *Service) PID() int { return s.cmd.Process.Pid }

// RSS is the process's resident anonymous memory (RssAnon, from /proc):
// what it allocated, its heap and stacks. The binary's own pages are left
// out: resident file pages, which in the guests (whose files are in RAM)
// are as much of its 30-40 MB as has run, and vary with how much of it
// ran, not with what the service holds.
func (s *Service) RSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID()))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no RssAnon in /proc/%d/status", s.PID())
}

// Signal sends sig to the process.
func (s *Service) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Done is closed when the process has exited; Err is then its exit error.
func (s *Service) Done() <-chan struct{} { return s.done }
func (s *Service) Err() error            { return s.err }

// Stop sends SIGTERM and waits for the process to end.
func (s *Service) Stop() error {
	select {
	case <-s.done:
		return s.err
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("director run did not stop on SIGTERM")
	}
	return s.err
}

// Output is the log so far, one record a line.
func (s *Service) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.raw, "\n")
}

// Mark is where the log is now, for WaitLog.
func (s *Service) Mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.logs)
}

// Count counts the log records that match.
func (s *Service) Count(match func(map[string]any) bool) int { return s.CountSince(0, match) }

// CountSince counts the log records after mark (Mark) that match.
func (s *Service) CountSince(mark int, match func(map[string]any) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.logs[min(mark, len(s.logs)):] {
		if match(m) {
			n++
		}
	}
	return n
}

// WaitLog waits for a log record after mark that matches, within a time
// scaled like every other wait (testenv.Scaled): in an emulated guest the
// service's records come seconds after what they record (an apply is
// logged once its tables are saved).
func (s *Service) WaitLog(mark int, match func(map[string]any) bool, within time.Duration) (map[string]any, bool) {
	deadline := time.Now().Add(testenv.Scaled(within))
	for time.Now().Before(deadline) {
		s.mu.Lock()
		for _, m := range s.logs[mark:] {
			if match(m) {
				s.mu.Unlock()
				return m, true
			}
		}
		s.mu.Unlock()
		select {
		case <-s.done:
			return nil, false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil, false
}

// Msg matches log records by message.
func Msg(msg string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["msg"] == msg }
}

// MetricsText fetches /metrics from the director's namespace.
func (tb *Testbed) MetricsText() (string, error) { return MetricsText(tb.Director) }

// Scrape fetches /metrics and parses it with Prometheus's text parser.
func (tb *Testbed) Scrape() (map[string]*dto.MetricFamily, error) { return Scrape(tb.Director) }

// MetricsText fetches /metrics from a service on host h.
func MetricsText(h *Host) (string, error) { return MetricsTextAt(h, MetricsAddr) }

// MetricsTextAt fetches /metrics from a service on host h serving them at
// addr.
func MetricsTextAt(h *Host, addr string) (string, error) {
	// The connection is made in the host's namespace; the HTTP client's
	// own dials would run on other threads, outside it.
	var conn net.Conn
	err := h.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp4", addr, 5*time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Scrape is MetricsText parsed with Prometheus's text parser.
func Scrape(h *Host) (map[string]*dto.MetricFamily, error) { return ScrapeAt(h, MetricsAddr) }

// ScrapeAt is MetricsTextAt parsed with Prometheus's text parser.
func ScrapeAt(h *Host, addr string) (map[string]*dto.MetricFamily, error) {
	text, err := MetricsTextAt(h, addr)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(text))
}
