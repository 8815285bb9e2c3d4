package table

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestInputDigest: every input that decides a table changes its digest,
// as does the fingerprint it is bound to and the seed that keys it; what
// decides no row (health checks, the ramp interval) does not; and the
// digest holds neither key nor seed.
func TestInputDigest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	base := randomTable(rng, 6, 2)
	base.Name = "api"
	base.Binds = []Bind{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: ProtoTCP, PortStart: 80, PortEnd: 80}}
	fp := "0123"
	d0 := InputDigest(base, fp)
	clone := func() *TableConfig {
		c := *base
		c.Backends = append([]Backend(nil), base.Backends...)
		c.Binds = append([]Bind(nil), base.Binds...)
		return &c
	}
	for what, change := range map[string]func(c *TableConfig){
		"name":     func(c *TableConfig) { c.Name = "web" },
		"hash key": func(c *TableConfig) { c.HashKey[3]++ },
		"seed":     func(c *TableConfig) { c.Seed[3]++ },
		"bind":     func(c *TableConfig) { c.Binds[0].PortEnd = 81 },
		"address":  func(c *TableConfig) { c.Backends[2].IP = netip.MustParseAddr("192.0.2.99") },
		"state": func(c *TableConfig) {
			if c.Backends[2].State == StateDraining {
				c.Backends[2].State = StateActive
			} else {
				c.Backends[2].State = StateDraining
			}
		},
		"health":  func(c *TableConfig) { c.Backends[2].Healthy = !c.Backends[2].Healthy },
		"weight":  func(c *TableConfig) { c.Backends[2].Weight = 7 },
		"domain":  func(c *TableConfig) { c.Backends[2].Domain = "rack-z" },
		"order":   func(c *TableConfig) { c.Backends[1], c.Backends[2] = c.Backends[2], c.Backends[1] },
		"removed": func(c *TableConfig) { c.Backends = c.Backends[:5] },
	} {
		c := clone()
		change(c)
		if InputDigest(c, fp) == d0 {
			t.Errorf("a changed %s leaves the digest as it was", what)
		}
	}
	if InputDigest(base, "4567") == d0 {
		t.Error("the digest is not bound to the fingerprint")
	}
	c := clone()
	port := 80
	c.Backends[0].Healthchecks = &Healthchecks{HTTP: &port}
	c.RampInterval = 5
	if InputDigest(c, fp) != d0 {
		t.Error("health checks or the ramp interval changed the digest")
	}
	if bytes.Contains(d0[:], base.HashKey[:4]) || bytes.Contains(d0[:], base.Seed[:4]) {
		t.Error("the digest holds the key or the seed")
	}
}
