// The configs a testbed's director serves: its backends, by number.

package testbed

import (
	"fmt"
	"net/netip"
	"strings"
)

// Config is BackendConfig for this testbed: with the IPv6 underlay, the
// backends are their IPv6 addresses and the table binds both VIPs.
func (tb *Testbed) Config(states map[int]string, healthy map[int]bool) string {
	if !tb.Underlay6 {
		return BackendConfig(states, healthy, len(tb.Backends))
	}
	return backendConfig(states, healthy, len(tb.Backends), BackendIP6, VIP, VIP6)
}

// BackendAddr is backend i's address in the table: BackendIP, or with
// the IPv6 underlay BackendIP6.
func (tb *Testbed) BackendAddr(i int) netip.Addr {
	if tb.Underlay6 {
		return BackendIP6(i)
	}
	return BackendIP(i)
}

// BackendConfig makes a forwarding table for the VIP with the given
// backend states, in GLB's JSON.
func BackendConfig(states map[int]string, healthy map[int]bool, n int) string {
	return backendConfig(states, healthy, n, BackendIP, VIP)
}

func backendConfig(states map[int]string, healthy map[int]bool, n int, addr func(int) netip.Addr, vips ...netip.Addr) string {
	var bs []string
	for i := 1; i <= n; i++ {
		st, ok := states[i]
		if !ok {
			st = "active"
		}
		if st == "absent" {
			continue
		}
		h, ok := healthy[i]
		if !ok {
			h = true
		}
		bs = append(bs, fmt.Sprintf(`{"ip": "%s", "state": "%s", "healthy": %v}`, addr(i), st, h))
	}
	return `{"tables": [{"name": "vip", "hash_key": "0f0e0d0c0b0a09080706050403020100", "seed": "00112233445566778899aabbccddeeff",
  "binds": [` + binds(vips) + `],
  "backends": [` + strings.Join(bs, ", ") + `]}]}`
}

// binds is the testbed table's binds: port 80 of each VIP.
func binds(vips []netip.Addr) string {
	var b []string
	for _, v := range vips {
		b = append(b, fmt.Sprintf(`{"ip": "%s", "proto": "tcp", "port": 80}`, v))
	}
	return strings.Join(b, ", ")
}
