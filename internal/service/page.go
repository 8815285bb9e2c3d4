package service

import (
	"bytes"
	_ "embed"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/director/director/internal/picture"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/table"
)

// The status page: what the status file says (the same document, from
// the same publish), with the live tables' backends, shares and pictures,
// on the metrics address. Read-only, refreshed by the browser, and
// self-contained: the style and the pictures come from the binary, and
// the Content-Security-Policy lets the page load nothing else.

//go:embed page.html
var pageHTML string

//go:embed page.css
var pageCSS []byte

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))

// pageRefresh is how often the page reloads itself, in seconds.
const pageRefresh = 5

// pagePolicy is the page's Content-Security-Policy: its own style and
// images, nothing else (no script, no frame, no form).
const pagePolicy = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type pageData struct {
	Host    string
	Version string
	Refresh int
	status.Status
	// Tables are the tables drawn whole: every table, or past
	// pageWhole those with a problem; Quiet the rest, named.
	Tables []pageTable
	Quiet  []string
}

// pageWhole is how many tables the page draws whole whatever they hold:
// past it, only those with a problem are, and the rest are named in a
// line, so that one table with a backend down is not the 700th picture.
const pageWhole = 8

type pageTable struct {
	Index       int
	Name        string
	Fingerprint string
	Binds       []string
	FailStatic  bool
	Held        bool // in a change the service holds
	Backends    []pageBackend
	// Rows are the backends' table rows, written by backendRows: a
	// table may have 256, and the template's reflection costs 20 µs a row.
	Rows template.HTML
}

type pageBackend struct {
	IP           string
	State        string
	Notes        string // weight, domain and balance cap, where the table has them
	Healthy      bool
	Rows         int
	Share        float64
	Color        string
	Checked      bool
	Results      []status.Result
	FailingSince *time.Time
	Failures     uint64
}

// Version is the binary's version, for the page's footer (set by main).
var Version = "dev"

// servePage adds the page's routes to mux: /, /style.css and
// /picture/N.png (live table N's rows). board is what it shows.
func servePage(mux *http.ServeMux, board *statusBoard) {
	mux.Handle("/", pageOnly(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		st, tables := board.current()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		pageTemplate.Execute(w, buildPage(st, tables))
	}))
	mux.Handle("/style.css", pageOnly(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Write(pageCSS)
	}))
	var pics pictureCache
	mux.Handle("/picture/", pageOnly(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/picture/"), ".png"))
		_, tables := board.current()
		if err != nil || !strings.HasSuffix(r.URL.Path, ".png") || n < 0 || n >= len(tables) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Write(pics.get(tables[n]))
	}))
}

// pictureCache keeps each live table's picture, by fingerprint (which
// covers its backends and rows), so that a page refreshed every few
// seconds draws a table again only when it changed. Bounded: emptied
// when it holds pictureCacheSize.
type pictureCache struct {
	mu  sync.Mutex
	pic map[string][]byte
}

const pictureCacheSize = 2 * 32 // the datapath's tables, twice over

func (c *pictureCache) get(t *table.Table) []byte {
	fp := table.Fingerprint(t)
	c.mu.Lock()
	data, ok := c.pic[fp]
	c.mu.Unlock()
	if ok {
		return data
	}
	var buf bytes.Buffer
	picture.WriteGridPNG(&buf, picture.TablePanel(t.Name, t, picture.PaletteFor(t)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pic == nil || len(c.pic) >= pictureCacheSize {
		c.pic = map[string][]byte{}
	}
	c.pic[fp] = buf.Bytes()
	return buf.Bytes()
}

// pageOnly serves GET and HEAD only, with the page's headers.
func pageOnly(f http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", pagePolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the status page is read-only", http.StatusMethodNotAllowed)
			return
		}
		f(w, r)
	})
}

// buildPage is what the page shows of st and the live tables.
func buildPage(st status.Status, tables []*table.Table) pageData {
	host, _ := os.Hostname()
	d := pageData{Host: host, Version: Version, Refresh: pageRefresh, Status: st}
	checks := map[string]status.Backend{}
	for _, b := range st.Backends {
		if _, seen := checks[b.IP]; !seen {
			checks[b.IP] = b
		}
	}
	failStatic, held := map[string]bool{}, map[string]bool{}
	for _, n := range st.FailStatic {
		failStatic[n] = true
	}
	for _, h := range st.Held {
		for _, pt := range h.Tables {
			held[pt.Name] = true
		}
	}
	for i, t := range tables {
		name := table.DisplayName(t.Name, i)
		if len(tables) > pageWhole && len(st.Problems(t, name)) == 0 {
			d.Quiet = append(d.Quiet, name)
			continue
		}
		pt := pageTable{Index: i, Name: name, Fingerprint: table.Fingerprint(t), FailStatic: failStatic[name], Held: held[name]}
		for _, b := range t.Binds {
			pt.Binds = append(pt.Binds, b.String())
		}
		rows := make([]int, len(t.Backends))
		for _, r := range t.Rows {
			rows[r.Primary]++
		}
		pal := picture.PaletteFor(t)
		caps := table.Caps(t.Backends, t.Balance)
		for k, b := range t.Backends {
			c := pal.Color(b.IP)
			pb := pageBackend{IP: b.IP.String(), State: b.State.String(), Healthy: b.Healthy, Rows: rows[k],
				Share: 100 * float64(rows[k]) / float64(max(len(t.Rows), 1)), Color: "#" + hex2(c.R) + hex2(c.G) + hex2(c.B)}
			var notes []string
			if b.W() != 1 {
				notes = append(notes, fmt.Sprintf("weight %d", b.W()))
			}
			if b.Domain != "" {
				notes = append(notes, "in "+b.Domain)
			}
			if caps != nil && b.Good() {
				n := fmt.Sprintf("cap %d", caps[k])
				if rows[k] >= caps[k] {
					n += " (at cap)"
				}
				notes = append(notes, n)
			}
			pb.Notes = strings.Join(notes, ", ")
			if cb, ok := checks[pb.IP]; ok {
				pb.Checked, pb.Results, pb.FailingSince, pb.Failures = true, cb.Results, cb.FailingSince, cb.Failures
			}
			pt.Backends = append(pt.Backends, pb)
		}
		pt.Rows = backendRows(pt.Backends)
		d.Tables = append(d.Tables, pt)
	}
	return d
}

// backendRows writes the rows of a table's backends, every text escaped.
func backendRows(bs []pageBackend) template.HTML {
	var b strings.Builder
	esc := html.EscapeString
	class := func(ok bool) string {
		if ok {
			return "good"
		}
		return "bad"
	}
	for _, pb := range bs {
		health := "unhealthy"
		if pb.Healthy {
			health = "healthy"
		}
		fmt.Fprintf(&b, `<tr class="backend" data-ip="%s" data-healthy="%t"><td><svg class="sw" width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="%s"/></svg></td>`,
			esc(pb.IP), pb.Healthy, esc(pb.Color))
		state := esc(pb.State)
		if pb.Notes != "" {
			state += ` <span class="notes">` + esc(pb.Notes) + `</span>`
		}
		fmt.Fprintf(&b, `<td class="ip">%s</td><td class="state">%s</td><td class="%s health">%s</td>`, esc(pb.IP), state, class(pb.Healthy), health)
		fmt.Fprintf(&b, `<td class="share"><meter min="0" max="100" value="%.1f"></meter> %.1f%% (%d)</td><td class="checks">`, pb.Share, pb.Share, pb.Rows)
		if !pb.Checked {
			b.WriteString("not checked (the config says)")
		}
		for _, r := range pb.Results {
			what := "ok"
			if !r.OK {
				what = "failed"
				if r.Reason != "" {
					what += ": " + r.Reason
				}
			}
			fmt.Fprintf(&b, `<span class="%s">%s %s in %.1f ms</span> `, class(r.OK), esc(r.Kind), esc(what), r.LatencyMS)
		}
		b.WriteString("</td><td>")
		if pb.FailingSince != nil {
			b.WriteString(pb.FailingSince.Format("15:04:05"))
		}
		b.WriteString("</td><td>")
		if pb.Checked {
			fmt.Fprint(&b, pb.Failures)
		}
		b.WriteString("</td></tr>\n")
	}
	return template.HTML(b.String())
}

func hex2(v uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>4], digits[v&15]})
}
