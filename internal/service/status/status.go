// Package status is what a running 'director run' publishes for
// 'director status', the doctor and the status page, and where: the
// status file's types, how it is found and read, and the commands that
// release a change the service holds. It imports neither the service nor
// its BGP speaker, so that what reads the file needs neither.
package status

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/director/director/internal/shellword"
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
	LastApply *Apply `json:"last_apply"`
	// FailStatic names the tables held fail-static.
	FailStatic []string `json:"fail_static"`
	// Checks sums up the backends' checks.
	Checks Checks `json:"checks"`
	BGP    *BGP   `json:"bgp"` // null without a bgp block
	// Held are the unsafe changes the service holds: what 'director
	// apply --allow-unsafe' may apply while it runs, and nothing else.
	Held []Held `json:"held"`
	// Recent are the service's last applies, newest first (at most
	// RecentApplies).
	Recent []Apply `json:"recent_applies"`
	// Backends are the checked backends' last results, by address.
	Backends []Backend `json:"backends"`
	// Interfaces are those the service steers (--attach), as it last
	// found them.
	Interfaces []Interface `json:"interfaces"`
	// JoiningUntil is, for a director that joined its fleet with no
	// history, when its VIPs are announced (join.go); absent otherwise.
	JoiningUntil *time.Time `json:"joining_until,omitempty"`
	Stale        bool       `json:"stale,omitempty"`
}

// RecentApplies is how many applies Status.Recent keeps.
const RecentApplies = 16

// Backend is what a checked backend's checks last found.
type Backend struct {
	IP string `json:"ip"`
	// Up is the dampened state (rise and fall); Passing the last round's.
	Up      bool     `json:"up"`
	Passing bool     `json:"passing"`
	Results []Result `json:"results"`
	// CheckedAt is when the last round came in; FailingSince when the
	// current run of failed rounds began (null while passing).
	CheckedAt    *time.Time `json:"checked_at"`
	FailingSince *time.Time `json:"failing_since"`
	// Failures counts the failed rounds since the service began.
	Failures uint64 `json:"failures"`
}

// Result is one check of a round.
type Result struct {
	Kind      string  `json:"kind"` // http, tcp, gue
	OK        bool    `json:"ok"`
	LatencyMS float64 `json:"latency_ms"`
	Reason    string  `json:"reason,omitempty"` // why it failed
}

// Interface is an interface the service steers.
type Interface struct {
	Name     string `json:"name"`
	Mode     string `json:"mode"`
	Attached bool   `json:"attached"`
}

// Apply is an apply the service made.
type Apply struct {
	Time    time.Time `json:"time"`
	Trigger string    `json:"trigger"` // start, checks, config, outside change, ...
	Verdict string    `json:"verdict"` // safe, or why an unsafe one was applied
	Changes []string  `json:"changes"`
}

// Checks sums up the checks: backends checked, up and down as their
// dampened state says, and failing (their last check failed).
type Checks struct {
	Backends int `json:"backends"`
	Up       int `json:"up"`
	Down     int `json:"down"`
	Failing  int `json:"failing"`
}

// Held is a change the service holds: the tables it would make live
// and the director config with them (ConfigDigest; "" for the live one).
type Held struct {
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

// ConfigDigest names a director config for Held: SHA-256 of GLB's
// form of it, "" for none.
func ConfigDigest(dc *table.DirectorConfig) string {
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
		if table.SamePlanTables(h.Tables, pts) && (h.Config == ConfigDigest(dc) || dc == nil && !h.ConfigChanges) {
			return true
		}
	}
	return false
}

// BGP is the BGP part of Status.
type BGP struct {
	ASN       uint32         `json:"asn"`
	RouterID  string         `json:"router_id"`
	Announced []netip.Prefix `json:"announced"`
	Peers     []Peer         `json:"peers"`
}

// Path is where the service for bpffs publishes its Status.
func Path(lockDir, bpffs string) string { return RunFile(lockDir, bpffs, ".status.json") }

// Read reads the Status of the service for bpffs; nil when none has
// been published. A status whose process is gone is marked Stale.
func Read(lockDir, bpffs string) (*Status, error) {
	path := Path(lockDir, bpffs)
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

// Peer is one BGP session, as status and metrics show it.
type Peer struct {
	Address     string    `json:"address"`
	ASN         uint32    `json:"asn"`
	State       string    `json:"state"` // idle, connect, active, opensent, openconfirm, established
	Established bool      `json:"established"`
	Since       time.Time `json:"since,omitzero"` // when it was established, if it is
	Flaps       uint32    `json:"flaps"`          // times it left established
	Advertised  uint64    `json:"advertised"`     // prefixes announced to the peer
}

// DefaultLockDir holds what a running service publishes for 'director
// status' (bpffs holds no regular files). The one-run lock itself is the
// pins' own (loader.LockRun).
const DefaultLockDir = "/run/director"

// RunFile is the path of a file of bpffs's service in lockDir, named by
// the pin directory's identity (device and inode), not its path: two
// paths to the same pins name the same file, and two pin directories never
// share one. "" when bpffs cannot be looked at.
func RunFile(lockDir, bpffs, ext string) string {
	var st unix.Stat_t
	if err := unix.Stat(bpffs, &st); err != nil {
		return ""
	}
	return filepath.Join(lockDir, fmt.Sprintf("run-%d_%d-%d%s", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino, ext))
}

// ReleaseCommands are the commands that review and apply a change 'director
// run' holds, for cli (director and its --bpffs), the service's director
// config dc ("" for none) and config: the plan of the config with dc, then
// that plan applied with --allow-unsafe (which the service lets through
// for exactly the change it holds). A held health change (health) is the
// checks' view, not the file's: the config is checked first (director
// healthcheck, as the service checks it), and the checked copy planned.
func ReleaseCommands(cli, dc, config string, health bool) []string {
	withDC := func(c string) string {
		if dc != "" {
			c += " --director-config " + shellword.Join(dc)
		}
		return c
	}
	var cmds []string
	if health {
		// With dc, or the live one at --bpffs, for the GUE checks' source.
		cmds = append(cmds, withDC(cli)+" healthcheck "+shellword.Join(config)+" -o checked.json")
		config = "checked.json"
	}
	return append(cmds, withDC(cli)+" plan "+shellword.Join(config)+" -o plan.json", cli+" apply plan.json --allow-unsafe")
}
