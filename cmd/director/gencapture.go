package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/table/config"
)

var genCaptureCmd = &command{
	name: "gen-capture", args: "--config CONFIG -o FILE [--flows N] [--seed S]",
	summary: "Write a deterministic synthetic capture of traffic to a config's binds.",
	help: "Write a deterministic synthetic capture (pcap, nanosecond timestamps) of traffic to CONFIG's binds:\n" +
		"IPv4 and IPv6 clients, TCP connections with heavy-tailed sizes, UDP flows, ICMP fragmentation-needed\n" +
		"and packet-too-big quoting real flows, ICMP echo, and noise no bind matches.",
	run: runGenCapture,
}

func runGenCapture(e *env, c *command, args []string) error {
	fs := e.flags(c)
	cfgPath := fs.String("config", "", "forwarding-table `CONFIG` whose binds the traffic goes to (required)")
	out := fs.String("o", "", "output `FILE` (required; - for stdout)")
	flows := fs.Int("flows", 1000, "`N` client flows to generate")
	seed := fs.Uint64("seed", 1, "random `SEED`: the same seed gives the same capture")
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *cfgPath == "" || *out == "" {
		return errors.New("gen-capture: --config CONFIG and -o FILE are required")
	}
	if *flows < 1 || *flows > pcapfile.MaxGenFlows {
		return fmt.Errorf("gen-capture: --flows %d: from 1 to %d", *flows, pcapfile.MaxGenFlows)
	}
	cfg, err := config.ParseFile(*cfgPath)
	if err != nil {
		return err
	}
	var st pcapfile.GenStats
	err = e.writeOutput(*out, 0o644, func(w io.Writer) error {
		cw, err := pcapfile.NewWriter(w)
		if err != nil {
			return err
		}
		st, err = pcapfile.Generate(cfg, pcapfile.GenOptions{Flows: *flows, Seed: *seed}, cw.Write)
		if err != nil {
			return err
		}
		return cw.Flush()
	})
	if err != nil {
		return fmt.Errorf("gen-capture: %w", err)
	}
	quic := ""
	if st.QUICFlows > 0 { // only where a table has QUIC-LB routing: other captures' lines stay as they were
		quic = fmt.Sprintf(", %d QUIC", st.QUICFlows)
	}
	fmt.Fprintf(e.reportTo(*out).stdout, "wrote %s: %d packets: %d flows (%d TCP, %d UDP%s, %d ICMP echo), %d ICMP errors, %d noise packets\n",
		wrote(*out), st.Packets, st.Flows, st.TCPFlows, st.UDPFlows, quic, st.EchoFlows, st.ICMPErrors, st.Noise)
	return nil
}
