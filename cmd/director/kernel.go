package main

import (
	"fmt"

	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// open adopts the director pinned at --bpffs.
func (e *env) open() (*loader.Director, error) {
	return loader.Open(e.bpffs)
}

// configure writes --director-config into the director, when given,
// resolving the gateway MAC through netlink if the file has none.
func (e *env) configure(d *loader.Director) error {
	if e.dirConfig == "" {
		return nil
	}
	dc, err := table.LoadDirectorConfig(e.dirConfig)
	if err != nil {
		return err
	}
	warnAll(e, dc.Warnings)
	mac, err := loader.GatewayMAC(dc)
	if err != nil {
		return err
	}
	if err := d.SetConfig(dc, mac); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "director config: source %s, gateway %s, hash %s", dc.SrcIP, mac, dc.HashFields)
	if dc.AltHashFields != 0 {
		fmt.Fprintf(e.stdout, ", alt hash %s", dc.AltHashFields)
	}
	fmt.Fprintf(e.stdout, ", ICMP echo forwarding %v\n", dc.ForwardICMPEcho)
	return nil
}

func tablesOf(r *loader.ApplyResult) []*table.Table { return loader.Tables(r.Tables) }
