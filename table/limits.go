package table

import (
	"fmt"
	"net/netip"
)

// MaxTables bounds the tables the table tools (show, diff, build) read
// from one file, GLB binaries included. The datapath holds fewer (see
// loader/mapimage).
const MaxTables = 1024

// Limit is how many tables whoever reads a config can hold.
type Limit struct {
	Tables int
	// Holder completes "at most N tables": who holds them, for the error.
	Holder string
}

// ToolLimit is the table tools' limit.
var ToolLimit = Limit{Tables: MaxTables, Holder: "the table tools read"}

// Check refuses n tables if they are more than the limit.
func (l Limit) Check(n int64) error {
	if n > int64(l.Tables) {
		return &FieldError{Path: "tables", Msg: fmt.Sprintf("%d tables; %s at most %d", n, l.Holder, l.Tables)}
	}
	return nil
}

// UnservableWarnings is Unservable as warnings, for the commands that can
// read such tables but not serve them.
func UnservableWarnings(tables []*Table) []string {
	var w []string
	for i, t := range tables {
		if u := UnservableWarning(i, t); u != "" {
			w = append(w, u)
		}
	}
	return w
}

// UnservableWarning is UnservableWarnings of table i alone: "" when it can
// be served.
func UnservableWarning(i int, t *Table) string {
	if e := MixedFamily(i, t); e != nil {
		return e.Error() + ", so plan and apply refuse this table"
	}
	return ""
}

// Unservable lists what GLB's formats can hold but the tools do not serve:
// a table whose backends are of both families (its outer header is one
// family, and its hop list one). IPv4 backends get GLB's GUE, IPv6 ones
// GUE over IPv6 (docs/wire.md). The table tools warn of it; plan, apply
// and run refuse it.
func Unservable(tables []*Table) ErrorList { return MixedFamilies(tables) }

// MixedFamilies lists the tables whose backends are of both families, at
// the first backend of the other family than the table's first: a table's
// GUE packets carry one family of hops.
func MixedFamilies(tables []*Table) ErrorList {
	var errs ErrorList
	for i, t := range tables {
		if e := MixedFamily(i, t); e != nil {
			errs = append(errs, e)
		}
	}
	return errs
}

// MixedFamily is MixedFamilies of table i alone: nil when its backends are
// one family.
func MixedFamily(i int, t *Table) *FieldError {
	first := -1 // the table's first backend of the other family than backends[0]
	for j, b := range t.Backends {
		if b.IP.Is4() != t.Backends[0].IP.Is4() {
			first = j
			break
		}
	}
	if first < 0 {
		return nil
	}
	fam := func(a netip.Addr) string {
		if a.Is4() {
			return "IPv4"
		}
		return "IPv6"
	}
	return &FieldError{Path: fmt.Sprintf("tables[%d].backends[%d].ip", i, first),
		Msg: fmt.Sprintf("%q is %s, and tables[%d].backends[0] is %s: a table's backends are one family, since its GUE packets carry one family of hops", t.Backends[first].IP, fam(t.Backends[first].IP), i, fam(t.Backends[0].IP))}
}
