package service

import (
	"os"
	"path/filepath"
	"time"

	"github.com/director/director/loader"
)

// A director that joins a fleet with no history (an empty kernel, and
// nothing saved: a new host, or one whose disk was wiped) lists only each
// row's primary and secondary, where the others list the earlier
// primaries of the last history_s. Were it announced at once, the router
// would move some flows to it, and a connection on an earlier primary
// would break there. So it serves, but does not announce its VIPs, until
// it has seen a whole window of changes itself: from then on its chains
// are the others' (the same edits make the same chains). The time it
// joined is saved with its tables, so that a restart meanwhile does not
// cut the wait short. --no-history-wait announces at once: for the first
// director of a fleet, through which no connection goes yet.

// joinFile is where the time of joining is kept, beside the saved tables.
func (s *service) joinFile() string {
	dir := loader.StateDirFor(s.o.StateDir, s.o.BPFFS)
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "joined")
}

// join decides, at the start, whether the director joins with no history:
// fresh is an empty kernel. A wait saved by a run before is resumed.
func (s *service) join(fresh bool) {
	window := s.longestWindow()
	path := s.joinFile()
	if window == 0 || s.o.NoHistoryWait || path == "" || s.cur.dc == nil || s.cur.dc.BGP == nil {
		return // announced at once, or never: no fleet to join
	}
	if data, err := os.ReadFile(path); err == nil {
		if at, err := time.Parse(time.RFC3339Nano, string(data)); err == nil && at.Before(time.Now()) {
			s.life.joinedUntil = at.Add(window)
		}
	} else if fresh && !loader.HasSaved(s.o.StateDir, s.o.BPFFS) {
		now := time.Now().UTC()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			os.WriteFile(path, []byte(now.Format(time.RFC3339Nano)), 0o600)
		}
		s.life.joinedUntil = now.Add(window)
	}
	if s.joining(time.Now()) {
		s.log.Warn("joining with no history: serving, but the VIPs are announced only once a whole history_s of changes is seen here "+
			"(connections the other directors keep on earlier primaries would break here before); --no-history-wait announces at once",
			"announce at", s.life.joinedUntil.Format(time.RFC3339))
	}
}

// joining reports whether the director still waits for its history.
func (s *service) joining(now time.Time) bool { return now.Before(s.life.joinedUntil) }

// joined ends the wait once it is over: the VIPs are announced.
func (s *service) joined(now time.Time) {
	if s.life.joinedUntil.IsZero() || s.joining(now) {
		return
	}
	s.life.joinedUntil = time.Time{}
	if path := s.joinFile(); path != "" {
		os.Remove(path)
	}
	s.log.Info("history whole: the VIPs are announced")
	s.announce()
	s.publish()
}

// longestWindow is the longest history_s of the served tables that list
// earlier primaries in their packets: those whose chains a director with
// no history would not match.
func (s *service) longestWindow() time.Duration {
	var w time.Duration
	for i := range s.cur.cfg().Tables {
		h := s.cur.cfg().Tables[i].History
		if !h.NoHops {
			w = max(w, h.Window)
		}
	}
	return w
}
