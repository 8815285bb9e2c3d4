package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/director/director/internal/lab/testenv"
)

// TestStatusPageInABrowser renders 'director run”s status page in a
// real browser (headless chromium) against the testbed's service: the
// page says what 'director status --json' says, changes after a health
// flip, and makes no request to any other host; its screenshots are the
// test's artifacts (go test -artifacts keeps them).
func TestStatusPageInABrowser(t *testing.T) {
	testenv.Kernel(t)
	browser := testenv.Browser(t)
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeHealth(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "tables.json")
	writeConfig(t, cfg, checkedConfig(nil, 3))
	allUp := fingerprint(t, nil, nil)
	startRun(t, tb, cfg)
	waitSettled(t, tb, allUp, 3*interval*(trigger+2))

	// The browser runs in the host's namespace; the page is served in the
	// director's. A relay on the host's loopback carries each connection
	// there, so that the page's address is its only host.
	addr := relay(t, tb)
	base := "http://" + addr + "/"

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1400, 1100), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, testenv.Scaled(90*time.Second))
	defer cancel()

	var mu sync.Mutex
	var requests []string
	// The browser starts here, in the host's namespace (this goroutine's
	// thread is not the director's).
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			requests = append(requests, e.Request.URL)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("starting %s: %v", browser, err)
	}

	// load opens the page afresh and returns its text and each
	// backend's health as the page marks it.
	load := func(what string) (text string, healthy map[string]string) {
		t.Helper()
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#applies")),
			chromedp.WaitReady(chromedp.CSS("img.picture"))); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		nodes, err := chromedp.Run(ctx, chromedp.Evaluate[[]map[string]string](
			`Array.from(document.querySelectorAll("tr.backend")).map(r => ({ip: r.dataset.ip, healthy: r.dataset.healthy}))`))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// The picture drew: its natural size is a table's 256 by 256.
		width, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelector("img.picture").naturalWidth`))
		if err != nil || width != 256 {
			t.Errorf("%s: the table's picture is %d wide (%v), want 256", what, width, err)
		}
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s: screenshot: %v", what, err)
		}
		file := filepath.Join(t.ArtifactDir(), "status-page-"+strings.ReplaceAll(what, " ", "-")+".png")
		if err := os.WriteFile(file, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: screenshot %s (%d bytes)", what, file, len(shot))
		healthy = map[string]string{}
		for _, n := range nodes {
			healthy[n["ip"]] = n["healthy"]
		}
		return text, healthy
	}
	// agrees checks the page against 'director status --json'.
	agrees := func(what, text string, healthy map[string]string) {
		t.Helper()
		doc := statusJSON(t, tb)
		for _, tab := range doc.Tables {
			if !strings.Contains(text, tab.Name+" "+tab.Fingerprint) {
				t.Errorf("%s: the page lacks table %s with fingerprint %s", what, tab.Name, tab.Fingerprint)
			}
		}
		s := doc.Service
		if s == nil || s.LastApply == nil {
			t.Fatalf("%s: status --json shows no service, or no apply", what)
		}
		for _, want := range []string{fmt.Sprintf("pid %d", s.PID), fmt.Sprintf("checks: %d up, %d down, %d failing", s.Checks.Up, s.Checks.Down, s.Checks.Failing),
			s.LastApply.Trigger, s.LastApply.Changes[0], "nothing held, nothing fail-static"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the page lacks %q (from status --json)", what, want)
			}
		}
		for _, b := range s.Backends {
			if healthy[b.IP] != fmt.Sprint(b.Up) {
				t.Errorf("%s: the page shows %s healthy=%q, status --json up=%v", what, b.IP, healthy[b.IP], b.Up)
			}
		}
		if len(healthy) != 3 {
			t.Errorf("%s: %d backends on the page, want 3", what, len(healthy))
		}
	}

	text, healthy := load("all up")
	agrees("all up", text, healthy)
	if healthy[BackendIP(1).String()] != "true" {
		t.Fatalf("backend 1 is not healthy on the page: %v", healthy)
	}

	// A health flip: backend 1's checks fail, the service applies it, and
	// the page says so.
	if err := tb.StopHealth(1); err != nil {
		t.Fatal(err)
	}
	waitFingerprint(t, tb, fingerprint(t, nil, map[int]bool{1: false}), interval*(trigger+2), "backend 1 down")
	// The kernel has the flip before the service reports it (the apply
	// saves the tables, then publishes its status): the page is read once
	// the report has it, as an operator would find it.
	reported := func() bool {
		s := statusJSON(t, tb).Service
		if s == nil {
			return false
		}
		for _, b := range s.Backends {
			if b.IP == BackendIP(1).String() && !b.Up {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(testenv.Scaled(5 * time.Second)); !reported(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("status --json does not report backend 1 down, 5 s after the kernel has it")
		}
	}
	text, healthy = load("backend 1 down")
	agrees("backend 1 down", text, healthy)
	if healthy[BackendIP(1).String()] != "false" || !strings.Contains(text, "unhealthy") || !strings.Contains(text, "http failed") {
		t.Fatalf("after the flip the page shows backend 1 as %q:\n%s", healthy[BackendIP(1).String()], text)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(requests) == 0 {
		t.Fatal("no requests seen: the check of where they go proves nothing")
	}
	for _, r := range requests {
		u, err := url.Parse(r)
		if err != nil || u.Host != addr || u.Scheme != "http" {
			t.Errorf("the page made a request to %s, not %s", r, addr)
		}
	}
	t.Logf("%d requests, all to %s", len(requests), addr)
}

// relay listens on the host's loopback and carries each connection to
// MetricsAddr in the director's namespace, until the test ends.
func relay(t *testing.T, tb *Testbed) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var up net.Conn
				if err := tb.Director.Do(func() (err error) {
					up, err = net.DialTimeout("tcp", MetricsAddr, 5*time.Second)
					return err
				}); err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// statusDoc is the part of 'director status --json' the page test reads.
type statusDoc struct {
	Tables []struct {
		Name        string `json:"name"`
		Fingerprint string `json:"fingerprint"`
	} `json:"tables"`
	Service *struct {
		PID       int `json:"pid"`
		LastApply *struct {
			Trigger string   `json:"trigger"`
			Changes []string `json:"changes"`
		} `json:"last_apply"`
		Checks struct {
			Up, Down, Failing int
		} `json:"checks"`
		Backends []struct {
			IP        string     `json:"ip"`
			Up        bool       `json:"up"`
			CheckedAt *time.Time `json:"checked_at"`
			Results   []struct {
				Kind string `json:"kind"`
				OK   bool   `json:"ok"`
			} `json:"results"`
		} `json:"backends"`
		Interfaces []struct {
			Name     string `json:"name"`
			Attached bool   `json:"attached"`
		} `json:"interfaces"`
	} `json:"service"`
}

// attachedInStatus is whether 'director status --json' has iface attached.
func attachedInStatus(t *testing.T, tb *Testbed, iface string) bool {
	t.Helper()
	for _, i := range statusJSON(t, tb).Service.Interfaces {
		if i.Name == iface {
			return i.Attached
		}
	}
	return false
}

func statusJSON(t *testing.T, tb *Testbed) statusDoc {
	t.Helper()
	var out, errOut strings.Builder
	cmd := exec.Command(directorBinary(t), "status", "--json", "--bpffs", tb.BPFFS)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := tb.Director.Do(cmd.Run); err != nil {
		t.Fatalf("status --json: %v\n%s", err, errOut.String())
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	return doc
}
