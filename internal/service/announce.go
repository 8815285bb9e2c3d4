package service

import (
	"context"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/director/director/internal/service/bgp"
	"github.com/director/director/internal/service/status"
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

// announcer announces the VIPs over BGP (internal/service/bgp). The loop alone
// starts, stops and moves it; GoBGP's goroutines and the metrics read its
// sessions, so the speaker and its settings are kept under mu.
type announcer struct {
	log     *slog.Logger
	m       *metrics
	changed func() // the sessions or announcements changed: the status file is rewritten

	mu    sync.Mutex
	sp    *bgp.Speaker
	cfg   *table.BGP
	drain atomic.Int64 // cfg's drain, for stopWithin, which may read it at any time
}

// start starts announcing with cfg (nil: none), restarting the sessions if
// it differs from what they run with; vips are what to announce.
func (a *announcer) start(cfg *table.BGP, vips func(withdrawWhenDown bool) []netip.Prefix) error {
	a.mu.Lock()
	same := reflect.DeepEqual(cfg, a.cfg) && (cfg == nil) == (a.sp == nil)
	old := a.sp
	if !same {
		a.sp, a.cfg = nil, cfg
	}
	a.mu.Unlock()
	if same {
		return nil
	}
	if old != nil {
		a.log.Info("bgp settings changed: restarting the sessions")
		old.Stop()
	}
	a.drain.Store(0)
	if cfg == nil {
		a.changed()
		return nil
	}
	a.drain.Store(int64(cfg.Drain))
	sp, err := bgp.Start(cfg, a.log, func(status.Peer) { a.changed() })
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.sp = sp
	a.mu.Unlock()
	a.announce(vips(cfg.WithdrawWhenDown))
	return nil
}

// running reports whether sessions run: whether there is anything to
// announce or withdraw.
func (a *announcer) running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sp != nil
}

// withdrawWhenDown is the running settings', true without any.
func (a *announcer) withdrawWhenDown() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg == nil || a.cfg.WithdrawWhenDown
}

// announce brings the announced VIPs to vips.
func (a *announcer) announce(vips []netip.Prefix) {
	a.mu.Lock()
	sp := a.sp
	a.mu.Unlock()
	if sp == nil {
		return
	}
	if err := sp.Announce(vips); err != nil {
		a.log.Error("bgp", "err", err)
	}
	a.m.vipsAnnounced.Set(float64(len(sp.Announced())))
	a.changed()
}

// stop withdraws every VIP, waits for routers to move the flows away, and
// ends the sessions.
func (a *announcer) stop() {
	a.mu.Lock()
	sp, cfg := a.sp, a.cfg
	a.mu.Unlock()
	if sp == nil {
		return
	}
	if err := sp.Announce(nil); err != nil {
		a.log.Error("bgp", "err", err)
	}
	a.changed()
	a.log.Info("bgp: every VIP withdrawn; draining before the sessions end", "drain", cfg.Drain)
	time.Sleep(cfg.Drain)
	sp.Stop()
	a.mu.Lock()
	a.sp = nil
	a.mu.Unlock()
}

// status is the BGP part of the status; nil without sessions.
func (a *announcer) status() *status.BGP {
	a.mu.Lock()
	sp, cfg := a.sp, a.cfg
	a.mu.Unlock()
	if sp == nil || cfg == nil {
		return nil
	}
	st := &status.BGP{ASN: cfg.ASN, RouterID: cfg.RouterID.String(), Announced: sp.Announced(), Peers: sp.Peers()}
	if st.Announced == nil {
		st.Announced = []netip.Prefix{}
	}
	return st
}

// peers are the sessions' states, for the metrics.
func (a *announcer) peers() []status.Peer {
	a.mu.Lock()
	sp := a.sp
	a.mu.Unlock()
	if sp == nil {
		return nil
	}
	return sp.Peers()
}

// startBGP starts announcing with the served director config's bgp
// settings, if it has any; once the datapath is attached and the tables
// applied, so routers never send traffic to a director not ready for it.
func (s *service) startBGP() error {
	var cfg *table.BGP
	if s.cur.dc != nil {
		cfg = s.cur.dc.BGP
	}
	return s.bgp.start(cfg, s.vips)
}

// announce brings the announced VIPs to what the live tables serve.
func (s *service) announce() {
	if s.bgp != nil {
		s.bgp.announce(s.vips(s.bgp.withdrawWhenDown()))
	}
}

// vips are what the live tables serve, while an interface steers and
// the history is whole (joining).
func (s *service) vips(withdrawWhenDown bool) []netip.Prefix {
	if !s.life.steering || s.joining(time.Now()) {
		return nil
	}
	return VIPs(s.live.tables, withdrawWhenDown)
}

// publish writes the status file with the service's view.
func (s *service) publish() {
	fs := make([]string, 0, len(s.failStatic))
	for n := range s.failStatic {
		fs = append(fs, n)
	}
	sort.Strings(fs)
	var ifaces []status.Interface
	for _, name := range s.o.Attach {
		if st, ok := s.pub.ifaces[name]; ok {
			ifaces = append(ifaces, st)
		}
	}
	var joining *time.Time
	if s.joining(time.Now()) {
		j := s.life.joinedUntil
		joining = &j
	}
	s.status.publish(status.Status{Since: s.life.since, Config: s.o.Config, DirectorConfig: s.o.DirectorConfig,
		LastApply: s.pub.lastApply, FailStatic: fs, Checks: s.checks.summary(), Held: s.hold.now,
		Recent: slices.Clone(s.pub.recent), Backends: s.checks.backends(), Interfaces: ifaces, JoiningUntil: joining}, s.live.tables)
	for _, f := range s.pub.told {
		f()
	}
	s.pub.told = nil
}

// tell logs, once the round's status is published (see service.told).
func (s *service) tell(level slog.Level, msg string, args ...any) {
	s.pub.told = append(s.pub.told, func() { s.log.Log(context.Background(), level, msg, args...) })
}
