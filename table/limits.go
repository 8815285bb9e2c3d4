package table

import "fmt"

// MaxTables bounds the tables the table tools (show, diff, build) read
// from one file. The datapath holds fewer (see the loader).
const MaxTables = 256

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
	for _, e := range Unservable(tables) {
		w = append(w, e.Error()+", so plan and apply refuse this table")
	}
	return w
}

// Unservable lists what GLB's formats can hold but its GUE encapsulation
// cannot carry: IPv6 backends (hops are IPv4; IPv6 clients and VIPs are
// fine). The table tools warn of it; plan and apply refuse it.
func Unservable(tables []*Table) ErrorList {
	var errs ErrorList
	for i, t := range tables {
		for j, b := range t.Backends {
			if !b.IP.Is4() {
				errs = append(errs, &FieldError{Path: fmt.Sprintf("tables[%d].backends[%d].ip", i, j),
					Msg: fmt.Sprintf("%q is IPv6: GUE packets carry IPv4 hops only", b.IP)})
			}
		}
	}
	return errs
}
