package main

import (
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// What commands share: adopting the pinned director and reading the
// director config.

// open adopts the director pinned at --bpffs.
func (e *env) open() (*loader.Director, error) {
	d, err := loader.Open(e.bpffs)
	if err == nil {
		d.StateDir = loader.StateDirFromEnv()
	}
	return d, err
}

// directorConfig reads --director-config with its gateway MAC resolved,
// or returns nil without the flag.
func (e *env) directorConfig() (*table.DirectorConfig, error) {
	if e.dirConfig == "" {
		return nil, nil
	}
	dc, err := config.ParseDirectorFile(e.dirConfig)
	if err != nil {
		return nil, err
	}
	warnAll(e, e.dirConfig, dc.Warnings)
	r, err := loader.ResolveGateway(dc)
	if err != nil {
		return nil, config.InFile(e.dirConfig, err)
	}
	// A source no interface has steers all the same, but nothing sent
	// to it comes back: said here, as doctor says it.
	if srcs, err := loader.Sources(r); err == nil {
		for _, s := range srcs {
			if s.Iface == "" {
				warnAll(e, e.dirConfig, []string{s.NotHere() + " (director doctor: source-address)"})
			}
		}
	}
	return r, nil
}
