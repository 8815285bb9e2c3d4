package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/director/director/internal/service/bgp"
	"github.com/director/director/table"
)

// Status is what a running service publishes for 'director status': its
// BGP sessions and announcements (the kernel holds the rest).
type Status struct {
	Version int       `json:"version"`
	PID     int       `json:"pid"`
	Time    time.Time `json:"time"` // when this was written
	// Since is when the service started; Config and DirectorConfig its
	// files ("" for none).
	Since          time.Time `json:"since"`
	Config         string    `json:"config"`
	DirectorConfig string    `json:"director_config"`
	// LastApply is the service's last change of the kernel's state: nil
	// before one (a start that found the tables right changes nothing).
	LastApply *StatusApply `json:"last_apply"`
	// FailStatic names the tables held fail-static.
	FailStatic []string `json:"fail_static"`
	// Checks sums up the backends' checks.
	Checks StatusChecks `json:"checks"`
	BGP    *StatusBGP   `json:"bgp"` // null without a bgp block
	// Held are the unsafe changes the service holds: what 'director
	// apply --allow-unsafe' may apply while it runs, and nothing else.
	Held []StatusHeld `json:"held"`
	// Recent are the service's last applies, newest first (at most
	// RecentApplies).
	Recent []StatusApply `json:"recent_applies"`
	// Backends are the checked backends' last results, by address.
	Backends []StatusBackend `json:"backends"`
	// Interfaces are those the service steers (--attach), as it last
	// found them.
	Interfaces []StatusInterface `json:"interfaces"`
	// JoiningUntil is, for a director that joined its fleet with no
	// history, when its VIPs are announced (join.go); absent otherwise.
	JoiningUntil *time.Time `json:"joining_until,omitempty"`
	Stale        bool       `json:"stale,omitempty"`
}

// RecentApplies is how many applies Status.Recent keeps.
const RecentApplies = 16

// StatusBackend is what a checked backend's checks last found.
type StatusBackend struct {
	IP string `json:"ip"`
	// Up is the dampened state (rise and fall); Passing the last round's.
	Up      bool           `json:"up"`
	Passing bool           `json:"passing"`
	Results []StatusResult `json:"results"`
	// CheckedAt is when the last round came in; FailingSince when the
	// current run of failed rounds began (null while passing).
	CheckedAt    *time.Time `json:"checked_at"`
	FailingSince *time.Time `json:"failing_since"`
	// Failures counts the failed rounds since the service began.
	Failures uint64 `json:"failures"`
}

// StatusResult is one check of a round.
type StatusResult struct {
	Kind      string  `json:"kind"` // http, tcp, gue
	OK        bool    `json:"ok"`
	LatencyMS float64 `json:"latency_ms"`
	Reason    string  `json:"reason,omitempty"` // why it failed
}

// StatusInterface is an interface the service steers.
type StatusInterface struct {
	Name     string `json:"name"`
	Mode     string `json:"mode"`
	Attached bool   `json:"attached"`
}

// StatusApply is an apply the service made.
type StatusApply struct {
	Time    time.Time `json:"time"`
	Trigger string    `json:"trigger"` // start, checks, config, outside change, ...
	Verdict string    `json:"verdict"` // safe, or why an unsafe one was applied
	Changes []string  `json:"changes"`
}

// StatusChecks sums up the checks: backends checked, up and down as their
// dampened state says, and failing (their last check failed).
type StatusChecks struct {
	Backends int `json:"backends"`
	Up       int `json:"up"`
	Down     int `json:"down"`
	Failing  int `json:"failing"`
}

// StatusHeld is a change the service holds: the tables it would make live
// and the director config with them (configDigest; "" for the live one).
type StatusHeld struct {
	Tables []table.PlanTable `json:"tables"`
	Config string            `json:"director_config"`
	// ConfigChanges is whether the held director config differs from the
	// live one: where it does not, an apply of the tables alone (no
	// --director-config, which keeps the live one) is the held change too.
	ConfigChanges bool `json:"director_config_changes"`
	// Health is whether the change held is the checks' (the config file
	// unchanged), which a person releases from a checked copy of it.
	Health  bool     `json:"health,omitempty"`
	Reasons []string `json:"reasons"`
}

// configDigest names a director config for StatusHeld: SHA-256 of GLB's
// form of it, "" for none.
func configDigest(dc *table.DirectorConfig) string {
	if dc == nil {
		return ""
	}
	data, err := dc.MarshalGLB()
	if err != nil {
		return "unknown"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, data) == nil {
		data = buf.Bytes()
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// Holds reports whether st holds the change that makes tables live with
// dc: the documented way, while a service runs, to apply what it holds.
func (st *Status) Holds(tables []*table.Table, dc *table.DirectorConfig) bool {
	if st == nil || st.Stale {
		return false
	}
	pts := table.PlanTables(tables)
	for _, h := range st.Held {
		if table.SamePlanTables(h.Tables, pts) && (h.Config == configDigest(dc) || dc == nil && !h.ConfigChanges) {
			return true
		}
	}
	return false
}

// StatusBGP is the BGP part of Status.
type StatusBGP struct {
	ASN       uint32          `json:"asn"`
	RouterID  string          `json:"router_id"`
	Announced []netip.Prefix  `json:"announced"`
	Peers     []bgp.PeerState `json:"peers"`
}

// StatusPath is where the service for bpffs publishes its Status.
func StatusPath(lockDir, bpffs string) string { return runFile(lockDir, bpffs, ".status.json") }

// ReadStatus reads the Status of the service for bpffs; nil when none has
// been published. A status whose process is gone is marked Stale.
func ReadStatus(lockDir, bpffs string) (*Status, error) {
	path := StatusPath(lockDir, bpffs)
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	if st.PID <= 0 || syscall.Kill(st.PID, 0) == syscall.ESRCH {
		st.Stale = true
	}
	return &st, nil
}

// statusBoard is the status file: the loop publishes its part (the
// service's view), the announcer's goroutines their sessions, and either
// may write it, under mu, aside and renamed into place.
type statusBoard struct {
	path string // "" for none
	bgp  func() *StatusBGP

	mu     sync.Mutex
	view   Status
	tables []*table.Table // the live tables, as the loop last knew them (the page's)
}

// publish replaces the loop's part and writes the file. tables are not
// changed after: the page reads them.
func (b *statusBoard) publish(view Status, tables []*table.Table) {
	b.mu.Lock()
	b.view, b.tables = view, tables
	b.mu.Unlock()
	b.write()
}

// current is the status as the file has it now, and the live tables.
func (b *statusBoard) current() (Status, []*table.Table) {
	var sb *StatusBGP
	if b.bgp != nil {
		sb = b.bgp()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.view
	st.Version, st.PID, st.Time, st.BGP = 1, os.Getpid(), time.Now().UTC(), sb
	if st.Held == nil {
		st.Held = []StatusHeld{}
	}
	if st.FailStatic == nil {
		st.FailStatic = []string{}
	}
	if st.Recent == nil {
		st.Recent = []StatusApply{}
	}
	if st.Backends == nil {
		st.Backends = []StatusBackend{}
	}
	if st.Interfaces == nil {
		st.Interfaces = []StatusInterface{}
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
