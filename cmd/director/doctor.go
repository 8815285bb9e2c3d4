package main

import (
	"fmt"
	"io"
	"os"

	"github.com/director/director/internal/doctor"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/table/config"
)

var doctorCmd = &command{
	uses: usesBPFFS | usesDirectorConfig,
	name: "doctor", args: "[--config CONFIG] [--client-mtu N] [--json]",
	summary: "Check this director host for what breaks a deployment; name each problem and its fix.",
	help: "Check the director host: the kernel, the loaded program and config, the attachments (generic\n" +
		"mode, gone, a native veth whose peer runs no XDP), the link MTU against a client's full-size packet\n" +
		"encapsulated, the outbound source addresses, the gateway MACs (IPv4 and IPv6) against the\n" +
		"neighbours, that the network routes each VIP here (16 UDP probes to a port no bind covers, watched\n" +
		"for coming back in), the live tables against CONFIG (--config, or the one director run serves, with\n" +
		"--director-config or its own), and director run's health and held changes. Each problem comes with\n" +
		"the command that fixes it. Exit 0: nothing found; 1: problems; 2: a check could not be made. See\n" +
		"'director backend doctor' for backend hosts.",
	run: runDoctor,
}

func runDoctor(e *env, c *command, args []string) error {
	fs := e.flags(c)
	cfg := fs.String("config", "", "the forwarding table `CONFIG` the live tables should be (default: director run's)")
	clientMTU := fs.Int("client-mtu", 1500, "the largest packet, in `BYTES`, a client sends")
	asJSON := fs.Bool("json", false, "print a JSON document")
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *clientMTU < 68 || *clientMTU > 65535 {
		return fmt.Errorf("doctor: --client-mtu %d: an IP packet is 68 to 65,535 bytes", *clientMTU)
	}
	o := doctor.DirectorOptions{BPFFS: e.bpffs, ClientMTU: *clientMTU, Config: *cfg}
	if o.Config == "" {
		// What director run serves, with its director config.
		if st, err := status.Read(status.DefaultLockDir, e.bpffs); err == nil && st != nil && !st.Stale {
			o.Config = st.Config
			if e.dirConfig == "" {
				e.dirConfig = st.DirectorConfig
			}
		}
	}
	o.CLI = "director"
	if e.bpffs != loader.DefaultBPFFS {
		o.CLI += " --bpffs " + shellword.Join(e.bpffs)
	}
	o.DirectorConfig = e.dirConfig
	if o.Config != "" {
		o.Planned = func(d *loader.Director) ([]string, error) { return plannedChanges(e, d, o.Config) }
	}
	r := doctor.Director(o)
	return doctorOut(e, r, *asJSON)
}

// plannedChanges plans path against what is live, as 'director plan'
// does, and lists what the plan would change.
func plannedChanges(e *env, d *loader.Director, path string) ([]string, error) {
	src, err := loadForApply(e, path, e.liveHealth)
	if err != nil {
		return nil, err
	}
	dc, err := e.directorConfig()
	if err != nil {
		return nil, err
	}
	p, err := d.Plan(&loader.Proposal{Tables: src.Tables, Input: src.Data, Config: dc})
	if err != nil {
		return nil, aboutConfig(path, err)
	}
	var out []string
	for _, t := range p.Diff.Tables {
		if t.Status != "unchanged" {
			out = append(out, fmt.Sprintf("table %s %s (%d rows' primary)", t.Name, t.Status, t.Rows.PrimaryChanged))
		}
	}
	if p.Director != nil {
		for _, c := range p.Director.Changes {
			out = append(out, fmt.Sprintf("director config %s %s -> %s", c.Setting, c.Old, c.New))
		}
	}
	return out, nil
}

// doctorOut prints r and ends with its exit code.
func doctorOut(e *env, r *doctor.Report, asJSON bool) error {
	if asJSON {
		if err := writeJSON(e.stdout, r); err != nil {
			return err
		}
	} else {
		printDoctor(e.stdout, r)
	}
	if code := r.ExitCode(); code != doctor.ExitClean {
		return exitCode(code)
	}
	return nil
}

func printDoctor(w io.Writer, r *doctor.Report) {
	for _, c := range r.Checks {
		switch c.Status {
		case doctor.Problem:
			for _, f := range c.Findings {
				fmt.Fprintf(w, "PROBLEM  %-18s %s\n", c.Name, f.What)
				fmt.Fprintf(w, "         %-18s fix: %s\n", "", f.Fix)
			}
		case doctor.Error:
			fmt.Fprintf(w, "UNKNOWN  %-18s could not check: %s\n", c.Name, c.Detail)
		case doctor.Skipped:
			fmt.Fprintf(w, "skipped  %-18s %s\n", c.Name, c.Detail)
		default:
			fmt.Fprintf(w, "ok       %-18s %s\n", c.Name, c.Detail)
		}
	}
	switch n := r.Findings(); {
	case n > 0:
		fmt.Fprintf(w, "%d problems found on this %s host\n", n, r.Host)
	case r.ExitCode() == doctor.ExitUnknown:
		fmt.Fprintf(w, "no problem found, but some checks could not be made\n")
	default:
		fmt.Fprintf(w, "no problem found on this %s host\n", r.Host)
	}
}

// runBackendDoctor is 'backend doctor'.
func runBackendDoctor(e *env, c *command, args []string) error {
	fs := e.flags(c)
	dir := fs.String("backend-bpffs", loader.BackendDir, "bpffs `DIR` the backend program is pinned in")
	cfg := fs.String("config", "", "the forwarding table `CONFIG`: its VIPs of tables this host serves, and their other backends")
	asJSON := fs.Bool("json", false, "print a JSON document")
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if e.set["bpffs"] {
		*dir = e.bpffs
	}
	o := doctor.BackendOptions{BPFFS: *dir, Config: *cfg, CLI: "director backend"}
	if *dir != loader.BackendDir {
		o.CLI += " --bpffs " + shellword.Join(*dir)
	}
	if *cfg != "" {
		data, err := os.ReadFile(*cfg)
		if err != nil {
			return fmt.Errorf("backend doctor: %w", err)
		}
		c, err := config.Parse(data)
		if err != nil {
			return fmt.Errorf("backend doctor: %w", config.InFile(*cfg, err))
		}
		o.Tables = c.Tables
	}
	return doctorOut(e, doctor.Backend(o), *asJSON)
}
