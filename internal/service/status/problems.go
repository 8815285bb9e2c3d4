package status

import (
	"fmt"
	"strings"

	"github.com/director/director/table"
)

// Problems are what a person should look at in the live table t, named
// name, by what the service publishes: its backends (inactive ones aside)
// that the checks find down or failing, or that it serves as unhealthy,
// fail-static, a held change. 'director status' and the status page list
// a table by them. None without a service (st nil).
func (st *Status) Problems(t *table.Table, name string) []string {
	if st == nil {
		return nil
	}
	checks := map[string]Backend{}
	for _, b := range st.Backends {
		if _, seen := checks[b.IP]; !seen {
			checks[b.IP] = b
		}
	}
	var out, down, failing, unhealthy []string
	for _, b := range t.Backends {
		if b.State == table.StateInactive {
			continue
		}
		ip := b.IP.String()
		cb, checked := checks[ip]
		switch {
		case checked && !cb.Up:
			down = append(down, ip)
		case checked && !cb.Passing:
			failing = append(failing, ip)
		case !b.Healthy:
			unhealthy = append(unhealthy, ip)
		}
	}
	for _, g := range []struct {
		ips  []string
		what string
	}{{down, "down by the checks"}, {failing, "failing their last check"}, {unhealthy, "unhealthy in the live table"}} {
		if len(g.ips) > 0 {
			out = append(out, fmt.Sprintf("%d backends %s (%s)", len(g.ips), g.what, strings.Join(g.ips, ", ")))
		}
	}
	if name == "" {
		return out
	}
	for _, n := range st.FailStatic {
		if n == name {
			out = append(out, "fail-static: its health changes are held")
			break
		}
	}
held:
	for _, h := range st.Held {
		for _, pt := range h.Tables {
			if pt.Name == name {
				out = append(out, "in a held change")
				break held
			}
		}
	}
	return out
}
