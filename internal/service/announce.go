package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"sort"
	"syscall"
	"time"

	"github.com/director/director/internal/bgp"
	"github.com/director/director/table"
)

// VIPs are what a director announces for tables: each bind's prefix (a
// host route for an address) of the tables with a good backend, or of
// every table when withdrawWhenDown is false. A prefix several tables
// bind is announced while any of them has one.
func VIPs(tables []*table.Table, withdrawWhenDown bool) []netip.Prefix {
	up := map[netip.Prefix]bool{}
	for _, t := range tables {
		good := false
		for _, b := range t.Backends {
			if b.Good() {
				good = true
				break
			}
		}
		for _, b := range t.Binds {
			p := b.Prefix.Masked()
			up[p] = up[p] || good || !withdrawWhenDown
		}
	}
	var out []netip.Prefix
	for p, ok := range up {
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// startBGP starts announcing with the served director config's bgp
// settings, if it has any; once the datapath is attached and the tables
// applied, so routers never send traffic to a director not ready for it.
func (s *service) startBGP() error {
	var cfg *table.BGP
	if s.cur.dc != nil {
		cfg = s.cur.dc.BGP
	}
	if reflect.DeepEqual(cfg, s.bgpCfg) && (cfg == nil) == (s.bgp == nil) {
		return nil
	}
	if s.bgp != nil {
		s.log.Info("bgp settings changed: restarting the sessions")
		s.bgp.Stop()
		s.bgp = nil
	}
	s.bgpCfg = cfg
	s.drain.Store(0)
	if cfg != nil {
		s.drain.Store(int64(cfg.Drain))
	}
	if cfg == nil {
		s.writeStatus()
		return nil
	}
	sp, err := bgp.Start(cfg, s.log, func(bgp.PeerState) { s.writeStatus() })
	if err != nil {
		return err
	}
	s.bgp = sp
	s.announce()
	return nil
}

// announce brings the announced VIPs to what the live tables serve.
func (s *service) announce() {
	if s.bgp == nil {
		return
	}
	var vips []netip.Prefix
	if s.steering {
		vips = VIPs(s.live, s.bgpCfg.WithdrawWhenDown)
	}
	if err := s.bgp.Announce(vips); err != nil {
		s.log.Error("bgp", "err", err)
	}
	s.m.vipsAnnounced.Set(float64(len(s.bgp.Announced())))
	s.writeStatus()
}

// stopBGP withdraws every VIP, waits for routers to move the flows away,
// and ends the sessions.
func (s *service) stopBGP() {
	if s.bgp == nil {
		return
	}
	if err := s.bgp.Announce(nil); err != nil {
		s.log.Error("bgp", "err", err)
	}
	s.writeStatus()
	s.log.Info("bgp: every VIP withdrawn; draining before the sessions end", "drain", s.bgpCfg.Drain)
	time.Sleep(s.bgpCfg.Drain)
	s.bgp.Stop()
	s.bgp = nil
}

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
	Held  []StatusHeld `json:"held"`
	Stale bool         `json:"stale,omitempty"`
}

// StatusApply is an apply the service made.
type StatusApply struct {
	Time    time.Time `json:"time"`
	Trigger string    `json:"trigger"` // start, checks, config, outside change, ...
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
	Tables  []table.PlanTable `json:"tables"`
	Config  string            `json:"director_config"`
	Reasons []string          `json:"reasons"`
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
		if table.SamePlanTables(h.Tables, pts) && h.Config == configDigest(dc) {
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

// writeStatus publishes the Status, written aside and renamed into place.
// It is called from the loop and from GoBGP's goroutine.
func (s *service) writeStatus() {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	st := s.view
	st.Version, st.PID, st.Time, st.Held = 1, os.Getpid(), time.Now().UTC(), s.heldNow
	if st.Held == nil {
		st.Held = []StatusHeld{}
	}
	if st.FailStatic == nil {
		st.FailStatic = []string{}
	}
	if sp, cfg := s.bgp, s.bgpCfg; sp != nil && cfg != nil {
		st.BGP = &StatusBGP{ASN: cfg.ASN, RouterID: cfg.RouterID.String(), Announced: sp.Announced(), Peers: sp.Peers()}
		if st.BGP.Announced == nil {
			st.BGP.Announced = []netip.Prefix{}
		}
	}
	data, _ := json.MarshalIndent(st, "", "  ")
	path := StatusPath(s.o.LockDir, s.o.BPFFS)
	if path == "" {
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err == nil {
		os.Rename(tmp, path)
	}
}

// publish updates what writeStatus says of the service's own state: the
// loop's, read here in the loop, and kept for GoBGP's goroutine too.
func (s *service) publish() {
	var c StatusChecks
	s.mu.Lock()
	for _, t := range s.targets {
		c.Backends++
		if t.damp.Up() {
			c.Up++
		} else {
			c.Down++
		}
		if !t.lastOK {
			c.Failing++
		}
	}
	s.mu.Unlock()
	var fs []string
	for n := range s.failStatic {
		fs = append(fs, n)
	}
	sort.Strings(fs)
	s.statusMu.Lock()
	s.view.Since, s.view.Config, s.view.DirectorConfig = s.started0, s.o.Config, s.o.DirectorConfig
	s.view.LastApply, s.view.FailStatic, s.view.Checks = s.lastApply, fs, c
	s.heldNow = s.holding
	s.statusMu.Unlock()
}
