package table

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// benchTable is n active, healthy IPv4 backends.
func benchTable(n int) *TableConfig {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	tc := &TableConfig{Name: "bench"}
	for i := range tc.Seed {
		tc.Seed[i] = byte(rng.Uint32())
	}
	for i := 0; i < n; i++ {
		tc.Backends = append(tc.Backends, Backend{IP: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), State: StateActive, Healthy: true})
	}
	return tc
}

// go test ./table -run XXX -bench Build
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{16, 64, 256, 1024} {
		tc := benchTable(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Build(tc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// weightedBenchTable is benchTable with distinct weights, 1 to n.
func weightedBenchTable(n int) *TableConfig {
	tc := benchTable(n)
	for i := range tc.Backends {
		tc.Backends[i].Weight = uint16(1 + i)
	}
	return tc
}

// BenchmarkBuildWeighted is BenchmarkBuild with distinct weights.
func BenchmarkBuildWeighted(b *testing.B) {
	for _, n := range []int{16, 256} {
		tc := weightedBenchTable(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := Build(tc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildDomains is BenchmarkBuild with the backends in four
// failure domains.
func BenchmarkBuildDomains(b *testing.B) {
	for _, n := range []int{16, 256} {
		tc := benchTable(n)
		for i := range tc.Backends {
			tc.Backends[i].Domain = fmt.Sprintf("rack-%d", i%4)
		}
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := Build(tc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildBalanced is BenchmarkBuild with a balance factor of 1.01,
// and with it and distinct weights.
func BenchmarkBuildBalanced(b *testing.B) {
	for _, weighted := range []bool{false, true} {
		tc := benchTable(256)
		name := "256"
		if weighted {
			tc, name = weightedBenchTable(256), "weighted/256"
		}
		tc.Balance = 1010
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := Build(tc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIncremental times each kind of one-backend change at 256
// backends, including producing the new table; the inverse change that
// restores the state is not timed.
func BenchmarkIncremental(b *testing.B) {
	const n = 256
	extra := Backend{IP: netip.MustParseAddr("10.99.0.1"), State: StateActive, Healthy: true}
	type op struct {
		name     string
		do, undo func(*Builder) error
	}
	set := func(k int, s State, h bool) func(*Builder) error {
		return func(bl *Builder) error { return bl.Set(k, s, h) }
	}
	for _, o := range []op{
		{"add", func(bl *Builder) error { return bl.Insert(n, extra) }, func(bl *Builder) error { return bl.Remove(n) }},
		{"remove", func(bl *Builder) error { return bl.Remove(n - 1) }, func(bl *Builder) error { return bl.Insert(n-1, benchTable(n).Backends[n-1]) }},
		{"drain", set(7, StateDraining, true), set(7, StateActive, true)},
		{"undrain", set(7, StateActive, true), set(7, StateDraining, true)},
		{"unhealthy", set(7, StateActive, false), set(7, StateActive, true)},
		{"healthy", set(7, StateActive, true), set(7, StateActive, false)},
		{"deactivate", set(7, StateInactive, true), set(7, StateActive, true)},
		{"activate", set(7, StateActive, true), set(7, StateInactive, true)},
	} {
		b.Run(o.name, func(b *testing.B) {
			bl, err := NewBuilder(benchTable(n))
			if err != nil {
				b.Fatal(err)
			}
			if o.name == "undrain" || o.name == "healthy" || o.name == "activate" {
				if err := o.undo(bl); err != nil { // start from the state the op leaves
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := o.do(bl); err != nil {
					b.Fatal(err)
				}
				_ = bl.Table()
				b.StopTimer()
				if err := o.undo(bl); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
