package main

import (
	"strings"
	"testing"
)

// TestPlanRunsApplysChecks: a table of IPv6 backends with a director
// config that has no outbound_src_ip6 cannot be served; plan says so, as
// apply does, naming the file and the table, rather than "safe".
func TestPlanRunsApplysChecks(t *testing.T) {
	dir := bpffsDir(t)
	b := []string{"--bpffs", dir}
	mustRun(t, 0, append(b, "load")...)
	want := `ipv6-backends.json: tables[0]: its backends are IPv6, and the director config has no outbound_src_ip6 to send GUE over IPv6 from ("v6")`
	for _, args := range [][]string{
		{"plan", cfgDir + "ipv6-backends.json", "--director-config", cfgDir + "director.conf"},
		{"apply", cfgDir + "ipv6-backends.json", "--director-config", cfgDir + "director.conf", "--yes"},
	} {
		out, errOut, code := runCmd(append(b, args...)...)
		if code != 1 || !strings.Contains(errOut, want) || strings.Contains(out, "safe") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", args[0], code, out, errOut, want)
		}
	}
	// With an IPv6 source it plans.
	mustRun(t, 2, append(b, "plan", cfgDir+"ipv6-backends.json", "--director-config", cfgDir+"director6.conf")...)
}
