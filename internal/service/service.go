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
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/director/director/internal/bgp"
	"github.com/director/director/internal/health"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
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
	LockDir      string          // where the run lock lives; DefaultLockDir
	Reload       <-chan struct{} // SIGHUP: read the config files now
	// Ready is called once the first apply is done and the interfaces are
	// attached; systemd's READY=1 by default.
	Ready func(status string)
	// Exit ends the process when a stop takes longer than the BGP drain
	// and a second (os.Exit by default): SIGTERM always ends the service.
	Exit func(code int)
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
		o.LockDir = DefaultLockDir
	}
	if o.Ready == nil {
		o.Ready = func(status string) { notify("READY=1\nSTATUS=" + status) }
	}
	if o.Exit == nil {
		o.Exit = os.Exit
	}
}

// service is one run's state. The loop goroutine owns everything but the
// targets' results, which the checks write under mu.
type service struct {
	o   Options
	log *slog.Logger
	d   *loader.Director
	m   *metrics

	cur *input // the config being served
	// The config files as last looked at, and the bad version of them
	// last reported.
	cfgFile, dcFile *watched
	badVersion      string
	pending         *input       // an edit waiting to be safe to apply
	held            string       // why pending (or the current health) is held, as last logged
	holding         []StatusHeld // what this reconcile holds (the loop's)
	lastApply       *StatusApply // the loop's last apply
	started0        time.Time    // when Run began
	view            Status       // the service's part of its status, for writeStatus (statusMu)
	heldNow         []StatusHeld // what the last reconcile held, published for 'director apply' (statusMu)

	mu             sync.Mutex
	targets        map[string]*target
	lastLocalFault time.Time // when a check the director could not make was last logged

	prober     *health.Prober
	live       []*table.Table // what the kernel holds, as last read or applied
	liveFPs    []string
	liveConfig *table.DirectorConfig
	failStatic map[string]bool
	heldHealth bool
	// waiting is set while a backend's fall waits for the others'
	// next results (desired): every result then wakes the loop.
	waiting atomic.Bool

	kick       chan struct{}
	coal       coalescer
	stopChecks context.CancelFunc
	checksDone chan struct{}
	statsdPort int
	stopStatsd context.CancelFunc

	started  bool         // attached after the first apply: BGP may announce
	steering bool         // an interface runs the program: the VIPs may be announced
	drain    atomic.Int64 // the BGP drain, for stopWithin
	// problems are what verify found wrong, as last logged, by subject.
	problems map[string]string
	bgp      *bgp.Speaker
	bgpCfg   *table.BGP
	statusMu sync.Mutex
}

// Run runs the service until ctx ends (SIGTERM), then stops the checks and
// leaves the datapath pinned and attached, so steering goes on and the
// next start adopts it (DetachOnExit detaches it). An error before the
// first apply ends Run; later errors are logged and exported, and the
// live tables keep serving.
func Run(ctx context.Context, o Options) (err error) {
	o.defaults()
	s := &service{o: o, log: o.Log, targets: map[string]*target{}, kick: make(chan struct{}, 1),
		failStatic: map[string]bool{}, coal: coalescer{window: o.Coalesce}, problems: map[string]string{}, started0: time.Now().UTC()}
	// Bad input is reported before anything else is touched.
	if s.cur, err = s.read(); err != nil {
		return err
	}
	finished := make(chan struct{})
	defer close(finished)
	go s.stopWithin(ctx, finished)
	unlock, err := loader.LockRun(o.BPFFS)
	if err != nil {
		return err
	}
	defer unlock()
	// Whatever ends the run, its status goes with it.
	defer os.Remove(StatusPath(o.LockDir, o.BPFFS))
	if err := os.MkdirAll(o.LockDir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", o.LockDir, err)
	}
	if s.d, err = loader.Load(o.BPFFS); err != nil {
		return err
	}
	defer s.d.Close()
	s.m = newMetrics(s.d.Stats)
	s.m.bgpPeers = func() []bgp.PeerState {
		if sp := s.bgp; sp != nil {
			return sp.Peers()
		}
		return nil
	}
	var ln net.Listener
	if o.MetricsAddr != "" {
		if ln, err = net.Listen("tcp", o.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelError)}))
		srv := serveHTTP(ln, mux, o.Log)
		defer srv.Close()
	}
	live, err := s.d.LiveState()
	if err != nil {
		return err
	}
	s.setLive(live.Tables, table.PlanTables(live.Tables), live.Config)
	s.configure(s.cur)
	defer func() { s.prober.Close() }()
	s.track(ctx)
	if err := s.reconcile("start", len(live.Tables) == 0); err != nil {
		return err
	}
	if s.lastApply == nil {
		// The live tables were found as they should be: as good as an
		// apply for an alert on the apply's age.
		s.m.lastApply.SetToCurrentTime()
	}
	if err := s.attach(); err != nil {
		return err
	}
	s.started, s.steering = true, true
	if err := s.startBGP(); err != nil {
		return err
	}
	status := fmt.Sprintf("serving %d tables", len(s.live))
	if s.held != "" {
		status += "; a change is held: " + s.held
	}
	o.Ready(status)
	s.log.Info("running", "bpffs", o.BPFFS, "config", o.Config, "tables", len(s.live), "checked backends", len(s.targets),
		"interval", s.cur.cfg.Checks.Interval, "rise", s.cur.cfg.Checks.Rise, "fall", s.cur.cfg.Checks.Fall)
	s.startChecks(ctx)
	s.loop(ctx)
	notify("STOPPING=1")
	s.stopBGP()
	s.stopAll()
	if o.DetachOnExit {
		for _, iface := range o.Attach {
			if err := s.d.Detach(iface); err != nil {
				s.log.Error("detach", "interface", iface, "err", err)
			}
		}
		s.log.Info("stopped; detached", "interfaces", o.Attach)
	} else {
		s.log.Info("stopped; the datapath stays attached and serving, for the next start to adopt")
	}
	return nil
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
	limit := time.Duration(s.drain.Load()) + time.Second
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
	retry := time.NewTicker(s.cur.cfg.Checks.Interval)
	defer retry.Stop()
	look := time.NewTicker(verifyEvery(s.cur.cfg.Checks.Interval))
	defer look.Stop()
	links := s.linkEvents(ctx)
	var due *time.Timer
	var dueC <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
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
		case <-retry.C:
			// Held changes are retried: an operator may have applied
			// the held config by hand, or the checks agree again.
			if s.pending != nil || s.heldHealth {
				s.reconcile("retry", false)
			}
		}
	}
}

// reread reads the config files, and when they changed makes them the
// pending input, tried at once. A SIGHUP (force) with nothing changed
// retries what is held.
func (s *service) reread(ctx context.Context, force bool) {
	in, looked, err := s.readIfChanged(force)
	if err != nil {
		// Logged and counted once per bad version: a bad file left in
		// place costs nothing more at every poll.
		if v := s.version(); v != s.badVersion {
			s.badVersion = v
			s.m.configErrors.Inc()
			s.log.Error("config not used; the last good one is kept", "err", err)
		}
		return
	}
	if looked && s.badVersion != "" {
		s.badVersion = ""
		s.log.Info("config files usable again", "config", s.o.Config)
	}
	if in == nil {
		if force {
			s.reconcile("sighup", false)
		}
		return
	}
	s.stopChecksWait() // the checks use the prober configure may replace
	s.pending, s.held = in, ""
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
		s.m.attached.WithLabelValues(a.Interface, a.Mode).Set(1)
	}
	return nil
}

// configure sets what the checks run with from in's settings, and the
// statsd sender from its director config.
func (s *service) configure(in *input) {
	c := in.cfg.Checks
	src := s.source(in)
	if s.prober == nil || s.prober.Timeout != c.Timeout || s.prober.Source != src {
		if s.prober != nil {
			s.prober.Close()
		}
		s.prober = health.NewProber(c.Timeout, src)
	}
	port := 0
	if in.dc != nil {
		port = in.dc.StatsdPort
	}
	if port != s.statsdPort {
		if s.stopStatsd != nil {
			s.stopStatsd()
			s.stopStatsd = nil
		}
		s.statsdPort = port
		if port != 0 {
			ctx, cancel := context.WithCancel(context.Background())
			s.stopStatsd = cancel
			go func() {
				if err := sendStatsd(ctx, s.d.GlobalCounters, port, statsdEvery); err != nil {
					s.log.Error("statsd", "port", port, "err", err)
				}
			}()
		}
	}
}

// source is the director's address, where GUE probes' echo replies come
// back to: the director config's src_ip.
func (s *service) source(in *input) netip.Addr {
	if in.dc != nil {
		return in.dc.SrcIP
	}
	if s.liveConfig != nil {
		return s.liveConfig.SrcIP
	}
	return netip.Addr{}
}

func (s *service) stopAll() {
	s.stopChecksWait()
	if s.stopStatsd != nil {
		s.stopStatsd()
	}
}

// input is a config (and director config) the service may serve.
type input struct {
	data, dcData []byte
	cfg          *table.Config
	dc           *table.DirectorConfig // nil: keep the live one
	builders     []*table.Builder      // one per table, kept for incremental rebuilds
	memo         []built               // the last tables built, by table
}

// read reads the config files, as at start.
func (s *service) read() (*input, error) {
	s.cfgFile = newWatched(s.o.Config, config.MaxConfigBytes, "a JSON config")
	if s.o.DirectorConfig != "" {
		s.dcFile = newWatched(s.o.DirectorConfig, config.MaxDirectorConfigBytes, "a director config")
	}
	if _, err := s.look(true); err != nil {
		return nil, err
	}
	return s.parse()
}

// look looks at the config files, reading a version not seen yet (force:
// reading them whatever stat says). It reports whether either is a new
// version, and why one cannot be used.
func (s *service) look(force bool) (bool, error) {
	changed := s.cfgFile.look(force)
	if s.dcFile != nil && s.dcFile.look(force) {
		changed = true
	}
	if s.cfgFile.err != nil {
		return changed, s.cfgFile.err
	}
	if s.dcFile != nil && s.dcFile.err != nil {
		return changed, s.dcFile.err
	}
	return changed, nil
}

// version names the config files' versions last looked at.
func (s *service) version() string {
	v := s.cfgFile.version()
	if s.dcFile != nil {
		v += " " + s.dcFile.version()
	}
	return v
}

// parse parses the config files' contents as last read.
func (s *service) parse() (*input, error) {
	data := s.cfgFile.data
	if table.IsGLBBinary(data) {
		return nil, fmt.Errorf("%s is a GLB binary table: director run reads the JSON config (forwarding_table.src.json), whose backends it checks", s.o.Config)
	}
	cfg, err := config.ParseLimit(data, loader.Limit)
	if err != nil {
		return nil, config.InFile(s.o.Config, err)
	}
	for _, w := range cfg.Warnings {
		s.log.Warn("config", "file", s.o.Config, "warning", w)
	}
	in := &input{data: data, cfg: cfg, builders: make([]*table.Builder, len(cfg.Tables)), memo: make([]built, len(cfg.Tables))}
	if s.dcFile != nil {
		in.dcData = s.dcFile.data
		dc, err := config.ParseDirector(in.dcData)
		if err != nil {
			return nil, config.InFile(s.o.DirectorConfig, err)
		}
		for _, w := range dc.Warnings {
			s.log.Warn("director config", "file", s.o.DirectorConfig, "warning", w)
		}
		if in.dc, err = loader.ResolveGateway(dc); err != nil {
			return nil, config.InFile(s.o.DirectorConfig, err)
		}
	}
	return in, nil
}

// readIfChanged looks at the config files and parses them when either is
// a new version whose contents differ from what is served or pending. It
// returns the input (nil when nothing is to change), whether a new version
// was looked at, and why it cannot be used.
func (s *service) readIfChanged(force bool) (*input, bool, error) {
	changed, err := s.look(force)
	if !changed || err != nil {
		return nil, changed, err
	}
	last := s.cur
	if s.pending != nil {
		last = s.pending
	}
	if string(s.cfgFile.data) == string(last.data) && (s.dcFile == nil || string(s.dcFile.data) == string(last.dcData)) {
		return nil, true, nil
	}
	in, err := s.parse()
	return in, true, err
}

// setLive records what the kernel holds.
func (s *service) setLive(tables []*table.Table, pts []table.PlanTable, dc *table.DirectorConfig) {
	s.live = tables
	s.liveFPs = make([]string, len(pts))
	for i, p := range pts {
		s.liveFPs[i] = p.Fingerprint
	}
	if dc != nil {
		s.liveConfig = dc
	}
	s.m.tableInfo.Reset()
	s.m.backendHealthy.Reset()
	for i, t := range tables {
		name := table.DisplayName(t.Name, i)
		s.m.tableInfo.WithLabelValues(name, s.liveFPs[i]).Set(1)
		for _, b := range t.Backends {
			v := 0.0
			if b.Healthy {
				v = 1
			}
			s.m.backendHealthy.WithLabelValues(name, b.IP.String()).Set(v)
		}
	}
}

// liveTable is the live table a config's table i replaces.
func (s *service) liveTable(tc *table.TableConfig, i int) *table.Table {
	return table.Replaced(s.live, tc, i)
}
