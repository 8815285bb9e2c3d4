package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/director/director/internal/service/health"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

var healthcheckCmd = &command{
	uses: usesDirectorConfig | usesBPFFS,
	name: "healthcheck", args: "CONFIG -o CHECKED.json",
	summary: "Check the backends once and write the config with \"healthy\" filled in.",
	help: "Run every check of CONFIG's backends once, as 'director run' does (GLB's glb-healthcheck), and\n" +
		"write CONFIG with \"healthy\" filled in for the backends that leave it out; the rest of the file\n" +
		"is kept as it is. For operators who keep GLB's pipeline: check, then plan and apply the result.\n" +
		"GUE checks need the director's addresses: --director-config's outbound_src_ip (and outbound_src_ip6\n" +
		"for IPv6 backends, whose GUE check is an ICMPv6 echo inside GUE over IPv6); without it, those of the\n" +
		"director loaded at --bpffs, as 'director run' takes them. The results are printed.",
	run: runHealthcheck,
}

func runHealthcheck(e *env, c *command, args []string) error {
	fs := e.flags(c)
	out := fs.String("o", "", "write the checked config to `FILE` (- for stdout)")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("healthcheck: -o FILE is required (see 'director help healthcheck')")
	}
	rep := e.reportTo(*out) // what it found goes to stderr when the config goes to stdout
	data, err := config.ReadInput(pos[0], table.ToolLimit)
	if err != nil {
		return err
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return config.InFile(pos[0], err)
	}
	warnAll(e, pos[0], cfg.Warnings)
	var src health.Sources
	if dc, err := e.directorConfig(); err != nil {
		return err
	} else if dc != nil {
		src = health.Sources{V4: dc.SrcIP, V6: dc.SrcIP6}
	} else if live := liveDirectorConfig(e); live != nil {
		src = health.Sources{V4: live.SrcIP, V6: live.SrcIP6}
	}
	if err := health.CanProbe(cfg, src); err != nil {
		return fmt.Errorf("healthcheck: %s: %w; nothing written", pos[0], err)
	}
	p := health.NewProber(cfg.Checks.Timeout, src)
	defer p.Close()
	results := health.Once(context.Background(), p, cfg, 64)
	for i := range results {
		for j, rs := range results[i] {
			if health.Local(rs) {
				return fmt.Errorf("healthcheck: %s: %s could not be checked: this machine lacks a resource (%s); nothing written",
					pos[0], cfg.Tables[i].Backends[j].IP, describeResults(rs))
			}
		}
	}
	filled, err := config.FillHealth(data, func(i, j int) bool { return results[i][j] != nil && health.Healthy(results[i][j]) })
	if err != nil {
		return config.InFile(pos[0], err)
	}
	up, down := printChecks(rep.stdout, cfg, results)
	if err := e.writeOutput(*out, 0o600, func(w io.Writer) error { _, err := w.Write(filled); return err }); err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	fmt.Fprintf(rep.stdout, "%d up, %d down; wrote %s\n", up, down, wrote(*out))
	return nil
}

// printChecks says what the checks found of each backend, and counts
// those up and down.
func printChecks(w io.Writer, cfg *table.Config, results [][][]health.Result) (up, down int) {
	for i := range cfg.Tables {
		tc := &cfg.Tables[i]
		name := table.DisplayName(tc.Name, i)
		for j, b := range tc.Backends {
			rs := results[i][j]
			switch {
			case !b.Checked:
				fmt.Fprintf(w, "%s %s: healthy %v (set in the config; not checked)\n", name, b.IP, b.Healthy)
			case b.State == table.StateInactive:
				fmt.Fprintf(w, "%s %s: inactive, not checked (healthy false)\n", name, b.IP)
			default:
				h := health.Healthy(rs)
				if h {
					up++
				} else {
					down++
				}
				fmt.Fprintf(w, "%s %s: %s (%s)\n", name, b.IP, map[bool]string{true: "up", false: "DOWN"}[h], describeResults(rs))
			}
		}
	}
	return up, down
}

// describeResults is a backend's check results in a line.
func describeResults(rs []health.Result) string {
	parts := make([]string, len(rs))
	for k, r := range rs {
		parts[k] = r.String()
	}
	return strings.Join(parts, ", ")
}

// liveDirectorConfig is the director config of the director loaded at
// --bpffs, or nil where none is (a host that only checks, GLB's way).
func liveDirectorConfig(e *env) *table.DirectorConfig {
	d, err := e.open()
	if err != nil {
		return nil
	}
	defer d.Close()
	dc, err := d.LiveConfig()
	if err != nil {
		return nil
	}
	return dc
}
