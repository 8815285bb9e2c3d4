package table

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
)

// Table is a built forwarding table: what a director serves for one service.
type Table struct {
	Name     string // empty for tables read from GLB binaries
	HashKey  Key
	Binds    []Bind
	Backends []Backend // config order; rows index into it
	Rows     []Row     // Rows entries
	// NoGoodRows counts rows whose primary is not an active-or-filling
	// healthy backend. A build puts one there wherever the table has one,
	// so built, these are the rows of a table with none (their hops are
	// the two best-ranked backends regardless); read from a GLB binary,
	// they are whatever rows it holds so.
	NoGoodRows int
	// Digest is the input digest of the config it was built from
	// (InputDigest); zero where that is not known (a GLB binary's table,
	// or one read from a kernel that recorded none).
	Digest Digest
	// Claimed is the fingerprint the kernel's registry records for a live
	// table ("" for none): trusted only as BuiltFrom says.
	Claimed string
	// Balance is the balance factor it was built with (TableConfig.Balance),
	// 0 for none.
	Balance uint16
	// QUIC is its QUIC-LB routing (TableConfig.QUIC); the backends' server
	// IDs are theirs (Backend.ServerID).
	QUIC QUIC
	// History is how its rows' earlier primaries are kept
	// (TableConfig.History); what they are is a History, beside it.
	History HistorySettings
	// Unbuilt is set on a table whose rows were not computed (Rows is
	// nil): diff's stand-in for a table with the same inputs on both sides
	// (UnbuiltTable). Its fingerprint is "".
	Unbuilt bool

	fp atomic.Pointer[string] // Fingerprint, once computed
}

// DisplayName is how every tool names the table at index i of a config (or
// of what the kernel holds): its name, or, for a table without one (a GLB
// binary's), its place, tables[i].
func DisplayName(name string, i int) string {
	if name != "" {
		return name
	}
	return "tables[" + strconv.Itoa(i) + "]"
}

// Row names a row's two hops by index into Table.Backends.
type Row struct{ Primary, Secondary uint32 }

// AddrBytes is the address as GLB hashes it: 4 bytes for IPv4, 16 for IPv6.
func AddrBytes(a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

// Lookup returns the row a flow hash selects.
func (t *Table) Lookup(hash uint64) (row int, primary, secondary Backend) {
	row = int(hash & (Rows - 1))
	r := t.Rows[row]
	return row, t.Backends[r.Primary], t.Backends[r.Secondary]
}

// UnbuiltTable is tc's table without its rows: what a comparison of a
// table with itself needs to say that nothing changed.
func UnbuiltTable(tc *TableConfig) *Table {
	return &Table{Name: tc.Name, HashKey: tc.HashKey, Binds: append([]Bind(nil), tc.Binds...),
		Backends: append([]Backend(nil), tc.Backends...), Balance: tc.Balance, QUIC: tc.QUIC, History: tc.History, Unbuilt: true}
}

// SameInputs reports whether a and b build the same table: the same name,
// key, seed, binds, balance factor and backends in the same order with
// the same address, state, health, weight, domain and server ID, and the
// same QUIC routing. (Checks and ramp
// intervals decide nothing in it.)
func SameInputs(a, b *TableConfig) bool {
	if a.Name != b.Name || a.HashKey != b.HashKey || a.Seed != b.Seed || a.Balance != b.Balance || a.QUIC != b.QUIC || a.History != b.History ||
		!slices.Equal(a.Binds, b.Binds) || len(a.Backends) != len(b.Backends) {
		return false
	}
	for i := range a.Backends {
		if !sameBackend(a.Backends[i], b.Backends[i]) {
			return false
		}
	}
	return true
}

// Build computes a table from its config.
func Build(tc *TableConfig) (*Table, error) {
	b, err := NewBuilder(tc)
	if err != nil {
		return nil, err
	}
	return b.Table(), nil
}

// BuildAll builds every table of a config.
func BuildAll(c *Config) ([]*Table, error) { return BuildAllReusing(c, nil) }

// BuildAllReusing is BuildAll where reuse (when not nil) may give table
// i ready made: a table it returns must be one that c.Tables[i] builds
// into (Table.BuiltFrom says so of a live one), and is not built again.
func BuildAllReusing(c *Config, reuse func(i int, tc *TableConfig) *Table) ([]*Table, error) {
	out := make([]*Table, len(c.Tables))
	for i := range c.Tables {
		if reuse != nil {
			if t := reuse(i, &c.Tables[i]); t != nil {
				out[i] = t
				continue
			}
		}
		t, err := Build(&c.Tables[i])
		if err != nil {
			return nil, fmt.Errorf("tables[%d]: %w", i, err)
		}
		out[i] = t
	}
	return out, nil
}
