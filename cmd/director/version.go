package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

var versionCmd = &command{
	uses: usesBPFFS | usesDirectorConfig, // they change and report nothing of the pins: the flags are harmless there
	name: "version", args: "",
	summary: "Print the version of this binary.",
	help:    "Print the version, the commit it was built from, the Go version and the platform. --version does the same.",
	run:     runVersion,
}

func runVersion(e *env, c *command, args []string) error {
	if _, err := e.parse(e.flags(c), args, 0, 0); err != nil {
		return err
	}
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	fmt.Fprintf(e.stdout, "director %s%s %s %s/%s\n", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
