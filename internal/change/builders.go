package change

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/director/director/table"
)

// Builders keeps a builder per table of a config, for the service: a
// health flip is applied to the table's builder one backend at a time
// (table.Builder.Set, each O(rows)); a config edit's one added, removed or
// changed backend by Builder.Update, incrementally, from the builder the
// edit took over (Adopt); anything else rebuilds the table. The last table
// built is kept with what it was built from, so asking again for the same
// is free. Stats counts the builds.
type Builders struct {
	cfg   *table.Config
	b     []*table.Builder
	memo  []built
	Stats Stats
}

type built struct {
	sig, meta string
	t         *table.Table
	fp        string
}

// NewBuilders keeps builders for cfg's tables, none built yet.
func NewBuilders(cfg *table.Config) *Builders {
	return &Builders{cfg: cfg, b: make([]*table.Builder, len(cfg.Tables)), memo: make([]built, len(cfg.Tables))}
}

// For is bs for cfg, a config of the same tables with other inputs (a
// ramp's next step): the builders, and what they built last, go on from
// where bs's are.
func (bs *Builders) For(cfg *table.Config) *Builders {
	return &Builders{cfg: cfg, b: bs.b, memo: bs.memo}
}

// Built is table i as it was last built, and its fingerprint; nil if it
// has not been.
func (bs *Builders) Built(i int) (*table.Table, string) {
	if i < 0 || i >= len(bs.memo) {
		return nil, ""
	}
	return bs.memo[i].t, bs.memo[i].fp
}

// Shares reports whether table i's builder is other's table j's.
func (bs *Builders) Shares(i int, other *Builders, j int) bool {
	return bs.b[i] != nil && j < len(other.b) && bs.b[i] == other.b[j]
}

// Has reports whether table i has a builder.
func (bs *Builders) Has(i int) bool { return bs.b[i] != nil }

// healthSig is what a table's build depends on of its backends: which
// they are, in order, with their states, health, weights and domains, and
// the balance factor. (Without the addresses, an edit that swapped one
// backend for another of the same state took the table built before.)
func healthSig(tc *table.TableConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d: ", tc.Balance)
	for _, be := range tc.Backends {
		fmt.Fprintf(&b, "%s %d%t%d %q ", be.IP, be.State, be.Healthy, be.W(), be.Domain)
	}
	return b.String()
}

// Build is table i with tc's states and health (tc is table i of the
// config, its health filled in), and its fingerprint.
func (bs *Builders) Build(i int, tc *table.TableConfig) (*table.Table, string, error) {
	sig := healthSig(tc)
	if m := bs.memo[i]; m.t != nil && m.sig == sig && m.meta == metaSig(tc) {
		return m.t, m.fp, nil
	}
	b := bs.incremental(bs.b[i], tc)
	if b == nil {
		var err error
		if b, err = table.NewBuilder(tc); err != nil {
			bs.b[i] = nil
			return nil, "", err
		}
		bs.Stats.Full++
		bs.b[i] = b
	}
	t := b.Table()
	fp := table.Fingerprint(t)
	bs.memo[i] = built{sig: sig, meta: metaSig(tc), t: t, fp: fp}
	return t, fp, nil
}

// incremental brings b to tc one change at a time: states, health and
// weights, then the name, key and binds (which decide no row) or the one
// backend a config edit added, removed or changed. nil where it cannot.
func (bs *Builders) incremental(b *table.Builder, tc *table.TableConfig) *table.Builder {
	if b == nil {
		return nil
	}
	cur := b.Config()
	if cur.Seed == tc.Seed && sameBackendList(cur.Backends, tc.Backends) {
		for k := range tc.Backends {
			o, n := cur.Backends[k], tc.Backends[k]
			if o.State != n.State || o.Healthy != n.Healthy {
				if err := b.Set(k, n.State, n.Healthy); err != nil {
					return nil
				}
			}
			if o.W() != n.W() {
				if err := b.SetWeight(k, n.Weight); err != nil {
					return nil
				}
			}
		}
	}
	inc, err := b.Update(tc)
	switch {
	case err != nil:
		return nil
	case inc:
		bs.Stats.Incremental++
	default:
		bs.Stats.Full++ // Update rebuilt it
	}
	return b
}

// sameBackendList reports whether a and b list the same backends (address,
// domain and QUIC server ID) in the same order, whatever their states,
// health and weights.
func sameBackendList(a, b []table.Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k].IP != b[k].IP || a[k].Domain != b[k].Domain || a[k].ServerID != b[k].ServerID || a[k].MoreServerIDs != b[k].MoreServerIDs {
			return false
		}
	}
	return true
}

// metaSig is what of a table decides no row but is part of it: its name,
// key, binds and QUIC routing, its key included (a memo of another's is
// not this table). Never shown: it holds secrets.
func metaSig(tc *table.TableConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %x %x %d/%t", tc.Name, tc.HashKey[:], tc.Seed[:], tc.History.Window, tc.History.NoHops)
	for _, bd := range tc.Binds {
		b.WriteString(" " + bd.String())
	}
	for ci, q := range tc.QUIC.Configs() {
		fmt.Fprintf(&b, " quic %d/%d/%d/%t/%x", q.ConfigID, q.ServerIDLen, q.NonceLen, q.Encrypted, q.Key[:])
		for _, be := range tc.Backends {
			b.WriteString(" " + be.ServerIDIn(ci).String())
		}
	}
	return b.String()
}

// Adopt takes from's builders of the tables bs's config has too (by
// name, or by index where unnamed) with the same seed, so that a config
// edit rebuilds only what it changed. A table the edit left exactly as it
// was shares its builder: both configs judge its health alike, so the
// builder is where either wants it, and the served config's health flips
// stay incremental while the edit is held. A changed table's builder is
// the edit's: from rebuilds that one table, should it build it again.
func (bs *Builders) Adopt(from *Builders) {
	if from == nil {
		return
	}
	for i := range bs.cfg.Tables {
		tc := &bs.cfg.Tables[i]
		j := i
		if tc.Name != "" {
			j = tableIndex(from.cfg, tc.Name)
		}
		if bs.b[i] != nil || j < 0 || j >= len(from.b) || from.b[j] == nil || from.cfg.Tables[j].Name != tc.Name ||
			from.cfg.Tables[j].Seed != tc.Seed {
			continue
		}
		// The last table built goes with its builder: an unchanged
		// table's build is then that table (its memo matches).
		bs.b[i], bs.memo[i] = from.b[j], from.memo[j]
		if !reflect.DeepEqual(from.cfg.Tables[j], *tc) {
			from.b[j], from.memo[j] = nil, built{}
		}
	}
}

func tableIndex(c *table.Config, name string) int {
	for i := range c.Tables {
		if c.Tables[i].Name == name {
			return i
		}
	}
	return -1
}
