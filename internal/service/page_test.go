package service

import (
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/picture"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// pageTables builds n tables of b backends, the first backend of each
// unhealthy.
func pageTables(t testing.TB, n, b int) []*table.Table {
	t.Helper()
	var sb strings.Builder
	sb.WriteString(`{"tables": [`)
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"name": "t%d", "hash_key": "%032x", "seed": "%032x", "binds": [{"ip": "10.200.%d.1", "proto": "tcp", "port": 80}], "backends": [`, i, 0xabcdef0123+i, 0x5eed0000+i, i)
		for j := 0; j < b; j++ {
			if j > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"ip": "10.%d.%d.%d", "state": "active", "healthy": %v}`, 100+i, j/200, j%200+1, j != 0)
		}
		sb.WriteString("]}")
	}
	sb.WriteString("]}")
	c, err := config.Parse([]byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return tabs
}

func pageServer(t testing.TB, st status.Status, tabs []*table.Table) *httptest.Server {
	board := &statusBoard{}
	board.publish(st, tabs)
	mux := http.NewServeMux()
	servePage(mux, board)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// TestStatusPage: the page shows the tables' fingerprints, binds and
// backends with health, shares and check results, the applies, what is
// held and fail-static; it is sent with its policy and nosniff, refuses
// anything but GET, never shows a key or seed; the pictures are the
// tables' rows.
func TestStatusPage(t *testing.T) {
	tabs := pageTables(t, 2, 4)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	failing := now.Add(-time.Minute)
	st := status.Status{Since: now, Config: "/etc/director/tables.json", FailStatic: []string{"t1"},
		Recent:     []status.Apply{{Time: now, Trigger: "checks", Verdict: "safe", Changes: []string{"t0/10.100.0.1: down (checks: http failed: refused)"}}},
		Held:       []status.Held{{Reasons: []string{"table t0: hash_key changed"}}},
		Backends:   []status.Backend{{IP: "10.100.0.1", Results: []status.Result{{Kind: "http", Reason: "refused", LatencyMS: 1.5}}, FailingSince: &failing, Failures: 7}},
		Interfaces: []status.Interface{{Name: "eth0", Mode: "native", Attached: true}}}
	srv := pageServer(t, st, tabs)
	res, body := get(t, srv.URL+"/")
	if res.StatusCode != 200 || res.Header.Get("Content-Security-Policy") != pagePolicy || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	for _, want := range []string{table.Fingerprint(tabs[0]), table.Fingerprint(tabs[1]), "tcp 10.200.0.1:80", "10.100.0.1", "unhealthy",
		"http failed: refused in 1.5 ms", ">7<", "FAIL-STATIC: t1", "HELD (unsafe, not applied): table t0: hash_key changed",
		"t0/10.100.0.1: down (checks: http failed: refused)", `src="/picture/1.png"`, "eth0", "no bgp block"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, secret := range []string{fmt.Sprintf("%032x", 0xabcdef0123), fmt.Sprintf("%032x", 0x5eed0000)} {
		if strings.Contains(body, secret) {
			t.Fatalf("the page shows a key or seed")
		}
	}
	if strings.Contains(body, "<script") || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Error("the page has a script or a link elsewhere")
	}
	res, err := http.Post(srv.URL+"/", "text/plain", strings.NewReader("x"))
	if err != nil || res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", res.StatusCode, err)
	}
	if res, _ := get(t, srv.URL+"/picture/2.png"); res.StatusCode != 404 {
		t.Errorf("a picture of no table: %d", res.StatusCode)
	}
	if res, css := get(t, srv.URL+"/style.css"); res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/css") || !strings.Contains(css, "body") {
		t.Errorf("style: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	r, err := http.Get(srv.URL + "/picture/0.png")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	img, err := png.Decode(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	pal := picture.PaletteFor(tabs[0])
	for _, row := range []int{0, 1, 300, 65535} {
		want := pal.Color(tabs[0].Backends[tabs[0].Rows[row].Primary].IP)
		if got := img.At(row%256, row/256); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("row %d drawn %v, want %v", row, got, want)
		}
	}
	if !strings.Contains(body, fmt.Sprintf(`fill="#%02x%02x%02x"`, pal.Color(netip.MustParseAddr("10.100.0.2")).R, pal.Color(netip.MustParseAddr("10.100.0.2")).G, pal.Color(netip.MustParseAddr("10.100.0.2")).B)) {
		t.Error("a backend's swatch is not its colour in the picture")
	}
}

// BenchmarkStatusPage renders the page and every table's picture for 32
// tables of 256 backends.
//
//	go test ./internal/service -run '^$' -bench StatusPage
func BenchmarkStatusPage(b *testing.B) {
	tabs := pageTables(b, 32, 256)
	board := &statusBoard{}
	board.publish(status.Status{}, tabs)
	mux := http.NewServeMux()
	servePage(mux, board)
	page := func() {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
	pictures := func() {
		for i := range tabs {
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("/picture/%d.png", i), nil))
			if w.Code != 200 {
				b.Fatal(w.Code)
			}
		}
	}
	b.Run("page", func(b *testing.B) {
		for b.Loop() {
			page()
		}
	})
	b.Run("pictures", func(b *testing.B) {
		for b.Loop() {
			mux = http.NewServeMux()
			servePage(mux, board)
			pictures()
		}
	})
	// Cold: every picture drawn (a fresh cache each time); warm: what a
	// refresh costs while the tables stay as they are.
	b.Run("both", func(b *testing.B) {
		for b.Loop() {
			mux = http.NewServeMux()
			servePage(mux, board)
			page()
			pictures()
		}
	})
	b.Run("both-warm", func(b *testing.B) {
		for b.Loop() {
			page()
			pictures()
		}
	})
}

// TestStatusPageNotes: a backend's weight, domain and balance cap are on
// the page, the cap marked where the backend is at it.
func TestStatusPageNotes(t *testing.T) {
	tc := &table.TableConfig{Name: "w", Balance: 1010,
		Binds: []table.Bind{{Prefix: netip.MustParsePrefix("10.200.0.9/32"), Proto: table.ProtoTCP, PortStart: 80, PortEnd: 80}}}
	for i := 1; i <= 20; i++ {
		b := table.Backend{IP: netip.AddrFrom4([4]byte{10, 100, 9, byte(i)}), State: table.StateActive, Healthy: true, Domain: fmt.Sprint("rack-", i%2)}
		if i == 1 {
			b.Weight = 3
		}
		tc.Backends = append(tc.Backends, b)
	}
	tab, err := table.Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	bs := table.BalanceOf(tab)
	if bs == nil || bs.AtCap == 0 {
		t.Fatalf("no backend at its cap: %+v", bs)
	}
	srv := pageServer(t, status.Status{Since: time.Now()}, []*table.Table{tab})
	_, body := get(t, srv.URL+"/")
	prim := make([]int, len(tab.Backends))
	for _, r := range tab.Rows {
		prim[r.Primary]++
	}
	for i, b := range tab.Backends {
		want := "in " + b.Domain + ", cap " + fmt.Sprint(bs.Caps[i])
		if i == 0 {
			want = "weight 3, " + want
		}
		if prim[i] >= bs.Caps[i] {
			want += " (at cap)"
		}
		if !strings.Contains(body, `<span class="notes">`+want+`</span>`) {
			t.Errorf("the page lacks %q for %s", want, b.IP)
		}
	}
}

// TestStatusPageSummarises (issue 49): past pageWhole tables, the page
// draws those with a problem (a backend down or failing its checks,
// fail-static, in a held change) and names the rest in one line.
func TestStatusPageSummarises(t *testing.T) {
	tabs := pageTables(t, 12, 3)
	for i, tb := range tabs {
		tb.Backends[0].Healthy = i != 4 // t4: a backend down
	}
	st := status.Status{Since: time.Now(), FailStatic: []string{"t6"},
		Held:     []status.Held{{Tables: []table.PlanTable{{Name: "t8"}}, Reasons: []string{"r"}}},
		Backends: []status.Backend{{IP: tabs[10].Backends[1].IP.String(), Up: true, Passing: false}}} // t10: failing
	srv := pageServer(t, st, tabs)
	_, body := get(t, srv.URL+"/")
	for i := range tabs {
		drawn := strings.Contains(body, fmt.Sprintf(`id="table-%d"`, i))
		if want := i == 4 || i == 6 || i == 8 || i == 10; drawn != want {
			t.Errorf("t%d drawn whole: %v, want %v", i, drawn, want)
		}
	}
	if !strings.Contains(body, "8 more tables, every backend up, nothing held or fail-static: t0, t1, t2, t3, t5, t7, t9, t11</p>") ||
		!strings.Contains(body, `<span class="bad">held change</span>`) {
		t.Errorf("the page does not name the quiet tables, or the held one:\n%s", body)
	}
	// A few tables are drawn whatever they hold.
	srv = pageServer(t, status.Status{Since: time.Now()}, tabs[:pageWhole])
	_, body = get(t, srv.URL+"/")
	if n := strings.Count(body, `<section class="table"`); n != pageWhole || strings.Contains(body, `id="quiet"`) {
		t.Errorf("%d tables: %d drawn whole", pageWhole, n)
	}
}
