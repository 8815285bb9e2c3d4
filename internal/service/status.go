package service

import (
	"encoding/json"
	"os"
	"sync"
	"time"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/table"
)

// statusBoard is the status file: the loop publishes its part (the
// service's view), the announcer's goroutines their sessions, and either
// may write it, under mu, aside and renamed into place.
type statusBoard struct {
	path string // "" for none
	bgp  func() *status.BGP

	mu     sync.Mutex
	view   status.Status
	tables []*table.Table // the live tables, as the loop last knew them (the page's)
}

// publish replaces the loop's part and writes the file. tables are not
// changed after: the page reads them.
func (b *statusBoard) publish(view status.Status, tables []*table.Table) {
	b.mu.Lock()
	b.view, b.tables = view, tables
	b.mu.Unlock()
	b.write()
}

// current is the status as the file has it now, and the live tables.
func (b *statusBoard) current() (status.Status, []*table.Table) {
	var sb *status.BGP
	if b.bgp != nil {
		sb = b.bgp()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.view
	st.Version, st.PID, st.Time, st.BGP = 1, os.Getpid(), time.Now().UTC(), sb
	if st.Held == nil {
		st.Held = []status.Held{}
	}
	if st.FailStatic == nil {
		st.FailStatic = []string{}
	}
	if st.Recent == nil {
		st.Recent = []status.Apply{}
	}
	if st.Backends == nil {
		st.Backends = []status.Backend{}
	}
	if st.Interfaces == nil {
		st.Interfaces = []status.Interface{}
	}
	return st, b.tables
}

// write writes the file.
func (b *statusBoard) write() {
	if b.path == "" {
		return
	}
	st, _ := b.current()
	b.mu.Lock()
	defer b.mu.Unlock()
	data, _ := json.MarshalIndent(st, "", "  ")
	tmp := b.path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err == nil {
		os.Rename(tmp, b.path)
	}
}
