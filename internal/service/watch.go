package service

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// The service looks at what others can change under it every interval,
// and at once when an interface comes or goes: the pins (put right from
// its own objects), the attachments (an interface that is there is
// attached again; one that is gone is reported), and the live tables (a
// change made outside it is logged, exported, and planned back like any
// other change). The metrics and the BGP announcements follow what it
// finds, so that they never say more than the kernel does.

// linkEvents sends on the returned channel whenever an interface of this
// network namespace changes, until ctx ends. A service that cannot watch
// links still looks every interval.
func (s *service) linkEvents(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		s.log.Warn("cannot watch interfaces; they are looked at every interval only", "err", err)
		return out
	}
	go func() {
		<-ctx.Done()
		close(done)
	}()
	go func() {
		for range updates {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

// verify looks at the pins, the attachments and the live tables.
func (s *service) verify(trigger string) {
	if done, err := s.d.RepairPins(); err != nil {
		s.once("pins", "cannot check the pins", "err", err)
	} else {
		for _, d := range done {
			s.tell(slog.LevelWarn, "pins changed underneath: "+d, "bpffs", s.o.BPFFS)
		}
	}
	s.verifyAttachments(trigger)
	if err := s.d.SyncLinkMTUs(); err != nil {
		s.once("mtus", "cannot record the interfaces' MTUs for the too-big check", "err", err)
	} else {
		s.resolved("mtus", "the interfaces' MTUs are recorded again")
	}
	s.verifyLive()
	if len(s.pub.told) > 0 {
		// Something changed or went wrong: the status says so before
		// the log does.
		s.publish()
	}
}

// once logs a problem the first time it is seen with this text, and
// again only after it has gone away.
func (s *service) once(key, msg string, args ...any) {
	text := fmt.Sprint(append([]any{msg}, args...)...)
	if s.pub.problems[key] == text {
		return
	}
	s.pub.problems[key] = text
	s.tell(slog.LevelError, msg, args...)
}

func (s *service) resolved(key, msg string, args ...any) {
	if _, ok := s.pub.problems[key]; ok {
		delete(s.pub.problems, key)
		s.tell(slog.LevelInfo, msg, args...)
	}
}

// verifyAttachments puts back an attachment lost to its link pin's
// removal, an unload, or its interface going away and coming back, and
// exports what is true: an interface is attached only while the kernel
// runs the program on it.
func (s *service) verifyAttachments(trigger string) {
	if len(s.o.Attach) == 0 {
		s.setSteering(s.anyAttached())
		return
	}
	have, err := s.d.Attachments()
	if err != nil {
		s.once("attachments", "cannot read the attachments", "err", err)
		return
	}
	byName := map[string]loader.Attachment{}
	for _, a := range have {
		byName[a.Interface] = a
	}
	steering := false
	for _, iface := range s.o.Attach {
		a, pinned := byName[iface]
		if pinned && a.State == loader.StateAttached {
			s.resolved("attach "+iface, "interface steering again", "interface", iface)
			s.setAttached(iface, a.Mode, true)
			steering = true
			continue
		}
		why := "its link pin is gone"
		if pinned {
			why = "its link's interface is " + map[string]string{loader.StateGone: "gone", loader.StateOtherNamespace: "in another namespace"}[a.State]
		}
		if _, err := netlink.LinkByName(iface); err != nil {
			s.setAttached(iface, s.o.Mode, false)
			s.once("attach "+iface, "interface gone: nothing is steered there until it comes back", "interface", iface, "why", why)
			continue
		}
		got, err := s.d.Attach(iface, s.o.Mode)
		if err != nil {
			s.setAttached(iface, s.o.Mode, false)
			s.once("attach "+iface, "attachment lost, and attaching again failed", "interface", iface, "why", why, "err", err)
			continue
		}
		delete(s.pub.problems, "attach "+iface)
		s.setAttached(iface, got.Mode, true)
		s.tell(slog.LevelWarn, "attachment lost: attached again", "interface", iface, "why", why, "mode", got.Mode, "link", got.LinkID, "trigger", trigger)
		steering = true
	}
	s.setSteering(steering)
}

// anyAttached reports whether any of the pins' attachments steers.
func (s *service) anyAttached() bool {
	have, err := s.d.Attachments()
	if err != nil {
		return false
	}
	for _, a := range have {
		if a.State == loader.StateAttached {
			return true
		}
	}
	return false
}

func (s *service) setAttached(iface, mode string, on bool) {
	if s.pub.ifaces == nil {
		s.pub.ifaces = map[string]status.Interface{}
	}
	prev, had := s.pub.ifaces[iface]
	s.pub.ifaces[iface] = status.Interface{Name: iface, Mode: mode, Attached: on}
	v := 0.0
	if on {
		v = 1
	}
	// Set, then drop the old mode's series: deleting first left a moment,
	// every interval, in which a scrape saw no sample for the interface.
	s.m.attached.WithLabelValues(iface, mode).Set(v)
	if had && prev.Mode != mode {
		s.m.attached.DeleteLabelValues(iface, prev.Mode)
	}
}

// setSteering records whether any interface steers: while none does, the
// VIPs are withdrawn (a director that announces them then is a black
// hole for its share of the fleet's traffic).
func (s *service) setSteering(on bool) {
	if on == s.life.steering {
		return
	}
	s.life.steering = on
	s.announce() // first: the log line then says what the metrics already do
	bgp := s.bgp != nil && s.bgp.running()
	switch {
	case on && bgp:
		s.tell(slog.LevelInfo, "steering again: the VIPs are announced")
	case on:
		s.tell(slog.LevelInfo, "steering again")
	case bgp:
		s.tell(slog.LevelError, "no interface steers: the VIPs are withdrawn until one does", "interfaces", s.o.Attach)
	case len(s.o.Attach) == 0:
		s.tell(slog.LevelWarn, "no interface steers: nothing is steered until one is attached (director attach IFACE, or run --attach IFACE)")
	default:
		s.tell(slog.LevelError, "no interface steers: nothing is steered until one does", "interfaces", s.o.Attach)
	}
}

// verifyLive notices a change of the live tables (or director config)
// that the service did not make, within one interval of it: logged with
// before and after, exported at once, and planned back.
func (s *service) verifyLive() {
	live, err := s.d.LiveState()
	if err != nil {
		s.once("live", "cannot read the live tables", "err", err)
		return
	}
	s.resolved("live", "the live tables can be read again")
	s.setHists(live.Histories) // an apply by hand may have moved them alone
	pts := table.PlanTables(live.Tables)
	now := make([]string, len(pts))
	for i, p := range pts {
		now[i] = p.Fingerprint
	}
	sameConfig := (live.Config == nil) == (s.live.config == nil) &&
		(live.Config == nil || len(table.CompareDirectorConfig(s.live.config, live.Config)) == 0)
	if sameNames(live.Tables, s.live.tables) && strings.Join(now, " ") == strings.Join(s.live.fps, " ") && sameConfig {
		return
	}
	before := describeLive(s.live.tables, s.live.fps)
	s.setLive(live.Tables, pts, live.Config)
	if live.Config == nil {
		s.live.config = nil
	}
	s.tell(slog.LevelWarn, "the live tables changed outside the service; planning from what is live now", "before", before,
		"after", describeLive(live.Tables, now), "director config changed", !sameConfig)
	s.reconcile("outside change", false)
}

func sameNames(a, b []*table.Table) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
	}
	return true
}

func describeLive(tables []*table.Table, fps []string) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = table.DisplayName(t.Name, i) + " " + table.ShortFingerprint(fps[i])
	}
	return out
}

// verifyEvery is how often verify runs without a link event: the checks'
// interval, at least 100 ms.
func verifyEvery(interval time.Duration) time.Duration { return max(interval, 100*time.Millisecond) }
