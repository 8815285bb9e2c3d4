// Package service is 'director run': the director as a service. It checks
// the backends as GLB's glb-healthcheck does, turns what the checks find
// and edits of its config files into changes, and hands each change to the
// one path by which any change reaches the kernel (loader.Director.Commit),
// applying by itself only what the plan judges safe. It exports metrics
// over HTTP (Prometheus) and, for GLB's dashboards, GLB's statsd lines.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/director/director/internal/daemon"
	"github.com/director/director/internal/service/health"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// Options configure a service.
type Options struct {
	Config         string // GLB's forwarding_table.src.json
	DirectorConfig string // director.conf; "" keeps the live one
	BPFFS          string
	Attach         []string // interfaces to attach to
	Mode           string   // native or generic
	MetricsAddr    string   // ADDR:PORT for /metrics; "" for none
	Log            *slog.Logger
	// FailStatic is the fraction of a table's checked backends that may go
	// down at once; beyond it (or when all would) the table is kept as it
	// is. 0.5 by default.
	FailStatic float64
	// Coalesce is the window within which changes go in one apply.
	Coalesce time.Duration
	// Poll is how often the config files are looked at for edits.
	Poll time.Duration
	// Concurrency bounds the checks under way at once.
	Concurrency  int
	DetachOnExit bool
	LockDir      string // where the run lock lives; status.DefaultLockDir
	// StateDir is where applies save the tables for a restart of the host
	// (loader.Director.StateDir); loader.StateDirFromEnv() by default.
	StateDir string
	Reload   <-chan struct{} // SIGHUP: read the config files now
	// Ready is called once the first apply is done and the interfaces are
	// attached; systemd's READY=1 by default.
	Ready func(status string)
	// Exit ends the process when a stop takes longer than the BGP drain
	// and a second (os.Exit by default): SIGTERM always ends the service.
	Exit func(code int)
	// NoHistoryWait announces the VIPs at once on an empty kernel with
	// nothing saved, rather than after the tables' history_s (join.go):
	// for the first director of a fleet, which no connection goes through.
	NoHistoryWait bool
}

func (o *Options) defaults() {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if o.FailStatic == 0 {
		o.FailStatic = 0.5
	}
	if o.Coalesce == 0 {
		o.Coalesce = 50 * time.Millisecond
	}
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	if o.Concurrency == 0 {
		o.Concurrency = 32
	}
	if o.Mode == "" {
		o.Mode = loader.ModeNative
	}
	if o.LockDir == "" {
		o.LockDir = status.DefaultLockDir
	}
	if o.StateDir == "" {
		o.StateDir = loader.StateDirFromEnv()
	}
	if o.Ready == nil {
		o.Ready = func(status string) { daemon.Notify("READY=1\nSTATUS=" + status) }
	}
	if o.Exit == nil {
		o.Exit = os.Exit
	}
}

// service is one run's state, owned by the goroutine that runs the loop.
// What other goroutines touch has its own type, and its own lock: the
// checks' results (checker), the BGP sessions (announcer), the status file
// (statusBoard).
type service struct {
	o   Options
	log *slog.Logger
	d   *loader.Director
	m   *metrics
	// checksStale is set when an edit is adopted: the checks of the
	// config it replaced are dropped (retrack) before the loop waits.
	checksStale bool
	// holds is what the datapath can hold (mapimage.CheckDatapath when
	// nil); a test puts a refusal of its own in, to fail a round.
	holds func([]*table.Table) error

	cur     *input // the config being served
	pending *input // an edit waiting to be safe to apply
	files   configFiles
	live    liveState
	hold    holdState
	// failStatic names the served config's tables held fail-static.
	failStatic map[string]bool
	pub        publication
	life       lifecycle

	checks *checker
	bgp    *announcer
	status *statusBoard
	statsd statsdSender
	coal   coalescer
}

// configFiles are the config files as last looked at, and the bad version
// of them last reported.
type configFiles struct {
	cfg, dc *watched
	bad     string
}

// liveState is what the kernel holds, as last read or applied.
type liveState struct {
	tables []*table.Table
	fps    []string
	config *table.DirectorConfig
	hists  []*table.History // the tables' histories (nil for none)
}

// holdState is what the service holds back as unsafe.
type holdState struct {
	logged string        // why the pending edit (or the current health) is held, as last logged
	now    []status.Held // what the last reconcile held
	health bool          // the served config's health change is held, or failed: retried
}

// publication is what the service has told, or is to tell, the world:
// the status file's and the metrics' sources besides the live state, and
// the log lines waiting for them.
type publication struct {
	// told are the log lines of a round (a reconcile, or a look at the
	// pins and attachments) about what it did or found, logged once its
	// status and metrics are out: whoever reads a line and then asks
	// (status, doctor, a scrape) finds what the line says.
	told []func()
	// exported is what exportLive last exported of the live tables.
	exported  []exported
	lastApply *status.Apply  // the last apply
	recent    []status.Apply // the last status.RecentApplies applies, newest first
	// ifaces are the interfaces of --attach as last found.
	ifaces map[string]status.Interface
	// problems are what verify found wrong, as last logged, by subject.
	problems map[string]string
}

// lifecycle is where the service is in its life: what it may announce.
type lifecycle struct {
	since    time.Time // when Run began
	started  bool      // attached after the first apply: BGP may announce
	steering bool      // an interface runs the program: the VIPs may be announced
	// joinedUntil is, for a director that came to an empty kernel with
	// nothing saved, when its history covers the window (join.go): its
	// VIPs are not announced before.
	joinedUntil time.Time
}

// statsdSender sends GLB's statsd lines to a port.
type statsdSender struct {
	port int
	stop context.CancelFunc
}

// Run runs the service until ctx ends (SIGTERM), then stops the checks and
// leaves the datapath pinned and attached, so steering goes on and the
// next start adopts it (DetachOnExit detaches it). An error before the
// first apply ends Run; later errors are logged and exported, and the
// live tables keep serving.
func Run(ctx context.Context, o Options) (err error) {
	o.defaults()
	s := &service{o: o, log: o.Log, failStatic: map[string]bool{}, coal: coalescer{window: o.Coalesce},
		pub: publication{problems: map[string]string{}}, life: lifecycle{since: time.Now().UTC()}, checks: newChecker(o.Log, o.Concurrency)}
	s.status = &statusBoard{} // its path names the pins, which Load makes
	// Bad input is reported before anything else is touched.
	if s.cur, err = s.read(); err != nil {
		return err
	}
	finished := make(chan struct{})
	defer close(finished)
	go s.stopWithin(ctx, finished)
	// A start that fails leaves no pins it made for the next start, by
	// whoever, to trip over (daemon.UndoFreshPins).
	undo := daemon.UndoFreshPins(o.BPFFS, s.log)
	defer func() { undo(err != nil && !s.life.started) }()
	unlock, err := loader.LockRun(o.BPFFS)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.MkdirAll(o.LockDir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", o.LockDir, err)
	}
	if s.d, err = loader.Load(o.BPFFS); err != nil {
		return err
	}
	s.d.StateDir = o.StateDir
	defer s.d.Close()
	// The path names the pin directory's inode, which exists only now that
	// Load made it. Whatever ends the run, its status goes with it.
	s.status.path = status.Path(o.LockDir, o.BPFFS)
	defer os.Remove(s.status.path)
	s.m = newMetrics(s.d.Stats)
	s.checks.m = s.m
	s.bgp = &announcer{log: o.Log, m: s.m, changed: s.status.write}
	s.status.bgp = s.bgp.status
	s.m.bgpPeers = s.bgp.peers
	closeHTTP, err := s.serveMetrics()
	if err != nil {
		return err
	}
	defer closeHTTP()
	live, err := s.d.LiveState()
	if err != nil {
		return err
	}
	s.setLive(live.Tables, table.PlanTables(live.Tables), live.Config)
	s.setHists(live.Histories)
	s.join(len(live.Tables) == 0)
	s.configure(s.cur)
	defer s.stopAll()
	s.track(ctx)
	if err := s.reconcile("start", len(live.Tables) == 0); err != nil {
		return err
	}
	if s.pub.lastApply == nil {
		// The live tables were found as they should be: as good as an
		// apply for an alert on the apply's age.
		s.m.lastApply.SetToCurrentTime()
	}
	if err := s.attach(); err != nil {
		return err
	}
	s.life.started, s.life.steering = true, true
	if err := s.startBGP(); err != nil {
		return err
	}
	s.publish() // the interfaces attached
	status := fmt.Sprintf("serving %d tables", len(s.live.tables))
	if s.hold.logged != "" {
		status += "; a change is held: " + s.hold.logged
	}
	o.Ready(status)
	s.log.Info("running", "bpffs", o.BPFFS, "config", o.Config, "tables", len(s.live.tables), "checked backends", s.checks.count(),
		"interval", s.cur.cfg().Checks.Interval, "rise", s.cur.cfg().Checks.Rise, "fall", s.cur.cfg().Checks.Fall)
	s.startChecks(ctx)
	s.loop(ctx)
	s.stop()
	return nil
}

// serveMetrics serves the metrics and the status page at --metrics, if
// given; the function returned closes the server.
func (s *service) serveMetrics() (func() error, error) {
	if s.o.MetricsAddr == "" {
		return func() error { return nil }, nil
	}
	ln, err := net.Listen("tcp", s.o.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.o.Log.Handler(), slog.LevelError)}))
	servePage(mux, s.status)
	return daemon.ServeHTTP(ln, mux, s.o.Log).Close, nil
}

// stop ends a run that started: BGP withdrawn, checks stopped, and the
// interfaces detached if asked to (else the datapath keeps serving, for
// the next start to adopt).
func (s *service) stop() {
	daemon.Notify("STOPPING=1")
	s.bgp.stop()
	s.stopAll()
	if !s.o.DetachOnExit {
		if s.anyAttached() {
			s.log.Info("stopped; the datapath stays attached and serving, for the next start to adopt")
		} else {
			s.log.Info("stopped; the datapath stays loaded, attached to no interface, for the next start to adopt")
		}
		return
	}
	for _, iface := range s.o.Attach {
		if err := s.d.Detach(iface); err != nil {
			s.log.Error("detach", "interface", iface, "err", err)
		}
	}
	s.log.Info("stopped; detached", "interfaces", s.o.Attach)
}

// stopWithin ends the process if, once ctx ends, the service has not
// finished stopping within the BGP drain and a second: whatever it is
// waiting for, SIGTERM ends it, and the datapath keeps serving as it is.
func (s *service) stopWithin(ctx context.Context, finished <-chan struct{}) {
	select {
	case <-finished:
		return
	case <-ctx.Done():
	}
	var drain time.Duration
	if s.bgp != nil {
		drain = time.Duration(s.bgp.drain.Load())
	}
	limit := drain + time.Second
	select {
	case <-finished:
	case <-time.After(limit):
		s.log.Error("stopping took longer than the drain and a second: exiting now; the datapath stays as it is", "limit", limit)
		s.o.Exit(1)
	}
}

// loop waits for changes: check results (kick), config edits, SIGHUP.
func (s *service) loop(ctx context.Context) {
	poll := time.NewTicker(s.o.Poll)
	defer poll.Stop()
	retry := time.NewTicker(s.cur.cfg().Checks.Interval)
	defer retry.Stop()
	look := time.NewTicker(verifyEvery(s.cur.cfg().Checks.Interval))
	defer look.Stop()
	history := time.NewTicker(time.Second)
	defer history.Stop()
	links := s.linkEvents(ctx)
	var due *time.Timer
	var dueC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.checks.kick:
			if dueC != nil {
				continue // already waiting; this change goes with the others
			}
			wait := s.coal.change(time.Now())
			if wait > 0 {
				due = time.NewTimer(wait)
				dueC = due.C
				continue
			}
			s.reconcile("checks", false)
			s.coal.applied(time.Now())
		case <-dueC:
			dueC = nil
			s.reconcile("checks", false)
			s.coal.applied(time.Now())
		case <-poll.C:
			s.reread(ctx, false)
		case <-s.o.Reload:
			s.log.Info("SIGHUP: reading the config files, and what the kernel holds")
			s.verify("sighup")
			s.reread(ctx, true)
		case <-look.C:
			s.verify("interval")
		case <-links:
			s.verify("interface change")
		case <-history.C:
			// An entry of a row's history past its window: the table
			// is written again without it.
			if s.historyDue(time.Now()) {
				s.reconcile("history", false)
			}
			s.joined(time.Now())
		case <-retry.C:
			// Held changes are retried: an operator may have applied
			// the held config by hand, the checks agree again, or the
			// earlier primaries they would strand are past the window.
			if s.pending != nil || s.hold.health {
				s.reconcile("retry", false)
			} else {
				// What the checks found since, published whether or not
				// it changed anything to apply.
				s.publish()
			}
		}
		s.retrack(ctx)
	}
}

// retrack drops the checks of a config no longer served or pending, once
// an edit is adopted: they are stopped, tracked again (the targets only
// the old config had are forgotten, with their metrics) and started.
func (s *service) retrack(ctx context.Context) {
	if !s.checksStale {
		return
	}
	s.checksStale = false
	s.checks.stopWait()
	s.track(ctx)
	s.startChecks(ctx)
	s.publish()
}

// reread reads the config files, and when they changed makes them the
// pending input, tried at once. A SIGHUP (force) with nothing changed
// retries what is held.
func (s *service) reread(ctx context.Context, force bool) {
	in, looked, err := s.readIfChanged(force)
	if err != nil {
		// Logged and counted once per bad version: a bad file left in
		// place costs nothing more at every poll.
		if v := s.version(); v != s.files.bad {
			s.files.bad = v
			s.m.configErrors.Inc()
			s.log.Error("config not used; the last good one is kept", "err", err)
		}
		return
	}
	if looked && s.files.bad != "" {
		s.files.bad = ""
		s.log.Info("config files usable again", "config", s.o.Config)
	}
	if in == nil {
		if force {
			s.reconcile("sighup", false)
		}
		return
	}
	s.checks.stopWait() // the checks use the prober configure may replace
	// The edit takes over the builders of the tables it shares with what
	// is pending or served: only what it changed is built again.
	adopt(in, s.pending)
	adopt(in, s.cur)
	s.pending, s.hold.logged = in, ""
	s.configure(in)
	s.track(ctx)
	s.startChecks(ctx)
	s.reconcile("config", false)
}

// attach attaches the program to the interfaces, and exports them.
func (s *service) attach() error {
	for _, iface := range s.o.Attach {
		a, err := s.d.Attach(iface, s.o.Mode)
		if err != nil {
			return err
		}
		s.setAttached(a.Interface, a.Mode, true)
	}
	return nil
}

// configure sets what the checks run with from in's settings, and the
// statsd sender from its director config. The checks must be stopped.
func (s *service) configure(in *input) {
	s.checks.configure(in.cfg().Checks.Timeout, s.source(in))
	port := 0
	if in.dc != nil {
		port = in.dc.StatsdPort
	}
	if port == s.statsd.port {
		return
	}
	if s.statsd.stop != nil {
		s.statsd.stop()
		s.statsd.stop = nil
	}
	s.statsd.port = port
	if port != 0 {
		ctx, cancel := context.WithCancel(context.Background())
		s.statsd.stop = cancel
		go func() {
			if err := sendStatsd(ctx, s.d.GlobalCounters, port, statsdEvery); err != nil {
				s.log.Error("statsd", "port", port, "err", err)
			}
		}()
	}
}

// track has the checker follow the served and pending configs' backends,
// with the settings of the newer.
func (s *service) track(ctx context.Context) {
	checks := s.cur.cfg().Checks
	if s.pending != nil {
		checks = s.pending.cfg().Checks
	}
	s.checks.track(ctx, []*input{s.cur, s.pending}, checks.Rise, checks.Fall,
		func(tc *table.TableConfig, i int, ip netip.Addr) (bool, bool) {
			return table.HealthOf(s.liveTable(tc, i), ip)
		})
}

// startChecks starts the checks at the newer config's interval.
func (s *service) startChecks(ctx context.Context) {
	interval := s.cur.cfg().Checks.Interval
	if s.pending != nil {
		interval = s.pending.cfg().Checks.Interval
	}
	s.checks.start(ctx, interval)
}

// source is the director's address, where GUE probes' echo replies come
// back to: the director config's src_ip.
func (s *service) source(in *input) health.Sources {
	if in.dc != nil {
		return health.Sources{V4: in.dc.SrcIP, V6: in.dc.SrcIP6}
	}
	if s.live.config != nil {
		return health.Sources{V4: s.live.config.SrcIP, V6: s.live.config.SrcIP6}
	}
	return health.Sources{}
}

// stopAll stops the checks and the statsd sender; again is a no-op.
func (s *service) stopAll() {
	s.checks.close()
	if s.statsd.stop != nil {
		s.statsd.stop()
		s.statsd.stop = nil
	}
}
