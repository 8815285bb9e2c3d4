package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/director/director/internal/service"
	"github.com/director/director/loader"
)

var runServiceCmd = &command{
	uses: usesBPFFS | usesDirectorConfig,
	name: "run", args: "--config FILE [--attach IFACE]... [--mode native|generic] [--metrics ADDR:PORT] [--log-format text|json] [--fail-static FRACTION] [--detach-on-exit] [--no-history-wait]",
	summary: "Run as a service: check backends, apply safe changes by themselves, export metrics.",
	help: "Load (adopting what is pinned), apply the config when its plan is safe or nothing is live, attach,\n" +
		"then keep the tables right: backends whose config leaves out \"healthy\" are checked as their\n" +
		"\"healthchecks\" say, and health changes and edits of the config files (watched, and re-read on\n" +
		"SIGHUP) go through the same plan as 'director plan'. Safe changes are applied by themselves; an\n" +
		"unsafe one is held, logged and exported until a person applies it with 'director apply\n" +
		"--allow-unsafe'. When more than FRACTION of a table's checked backends would go down at once,\n" +
		"or all of them would, the table is kept as it is (fail-static). SIGTERM stops the checks and\n" +
		"leaves the datapath attached and serving for the next start to adopt.",
	run: runService,
}

// stringsFlag is a flag that may be given more than once.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func runService(e *env, c *command, args []string) error {
	fs := e.flags(c)
	config := fs.String("config", "", "the forwarding-table config `FILE` (GLB's forwarding_table.src.json)")
	var attach stringsFlag
	fs.Var(&attach, "attach", "attach to `IFACE` (repeat for more)")
	mode := fs.String("mode", loader.ModeNative, "XDP `MODE`: native (driver) or generic (skb)")
	metrics := fs.String("metrics", "", "serve Prometheus metrics at http://`ADDR:PORT`/metrics")
	logFormat := fs.String("log-format", "text", "log `FORMAT`: text or json")
	failStatic := fs.Float64("fail-static", 0.5, "keep a table as it is when more than this `FRACTION` of its checked backends would go down at once")
	detach := fs.Bool("detach-on-exit", false, "detach the interfaces on exit (by default steering goes on)")
	noWait := fs.Bool("no-history-wait", false, "on an empty kernel with nothing saved, announce the VIPs at once, not after history_s (the first director of a fleet)")
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *config == "" {
		return fmt.Errorf("run: --config FILE is required (see 'director help run')")
	}
	if *failStatic <= 0 || *failStatic > 1 {
		return fmt.Errorf("run: --fail-static %v: want a fraction above 0 and at most 1", *failStatic)
	}
	if *mode != loader.ModeNative && *mode != loader.ModeGeneric {
		return fmt.Errorf("run: --mode %q: want native or generic", *mode)
	}
	log, err := serviceLog(e, *logFormat)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}()
	service.Version = version
	return service.Run(ctx, service.Options{
		Config: *config, DirectorConfig: e.dirConfig, BPFFS: e.bpffs,
		Attach: attach, Mode: *mode, MetricsAddr: *metrics, Log: log,
		FailStatic: *failStatic, DetachOnExit: *detach, Reload: reload, NoHistoryWait: *noWait,
	})
}

// serviceLog is a service's logger, in format text or json, to stderr.
func serviceLog(e *env, format string) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(e.stderr, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.stderr, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
