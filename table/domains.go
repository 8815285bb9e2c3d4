package table

// Failure domains. When a table's ranked backends are in more than one
// domain, a row's ranking R becomes R' = R[0], D, then the rest of R in
// order, D being the best-ranked backend whose domain is not R[0]'s; and
// GLB's rule picks the hops from R' as it does from R: the primary is the
// first good backend, the secondary R'[0] when that is not the primary,
// else R'[1]. So where R[0] is good the secondary is in another domain,
// and every change that keeps connections under GLB's rule keeps them
// here: a backend going down, draining or coming back keeps the other hop,
// which is what it was before. R' depends on R[0]'s domain, not its
// health.
//
// A filling backend at R[0] keeps GLB's R[1] as its secondary: a backend
// added as filling takes rows whose old primary (R[1]) stays their
// secondary, whatever its domain; once the backend is active, only
// secondaries change. That is the one place the domain rule gives way to
// the rule that keeps connections, and such rows are counted
// (DomainStats.Conflicts).

// numberDomains numbers the backends' domains in order of first
// appearance.
func (b *Builder) numberDomains() {
	ids := map[string]uint16{}
	b.dom = b.dom[:0]
	for _, be := range b.cfg.Backends {
		id, ok := ids[be.Domain]
		if !ok {
			id = uint16(len(ids))
			ids[be.Domain] = id
		}
		b.dom = append(b.dom, id)
	}
}

func (b *Builder) good(i int32) bool { return i != none && b.flags[i]&flagGood != 0 }

// domainHops is the row rule over R'.
func (b *Builder) domainHops(rk *rank) Row {
	p, s := rk.i0, rk.id // R'[0], R'[1]
	if s == none {
		s = rk.i1 // one domain among this row's backends
	}
	switch {
	case b.good(rk.i0):
		if b.flags[rk.i0]&flagFilling != 0 && rk.i1 != none {
			s = rk.i1
		}
	case b.good(rk.id):
		p, s = rk.id, rk.i0
	case rk.ig != none:
		p, s = rk.ig, rk.i0
	}
	if s == none {
		s = p // a single backend is both hops
	}
	return Row{uint32(p), uint32(s)}
}

// DomainStats is what failure domains mean for a table's rows.
type DomainStats struct {
	// Domains are the domains of the table's backends, in order of first
	// appearance ("" for backends without one).
	Domains []DomainShare `json:"domains"`
	// SameDomain rows have both hops in one domain.
	SameDomain int `json:"same_domain_rows"`
	// Conflicts of them have a good backend in another domain, which the
	// rule that keeps connections passed over (a filling primary).
	Conflicts int `json:"conflicts"`
}

// DomainShare is one domain's part in the rows.
type DomainShare struct {
	Name        string `json:"name"`
	Backends    int    `json:"backends"`
	PrimaryRows int    `json:"primary_rows"`
	// Orphaned rows would be left with no hop if every backend of the
	// domain failed: both their hops are in it.
	Orphaned int `json:"orphaned_rows"`
}

// Domains reports the table's failure domains: each one's share of primary
// rows and the rows it would orphan, and the rows whose hops share one.
// Nil when the table's backends are all in one domain.
func Domains(t *Table) *DomainStats {
	index := map[string]int{}
	st := &DomainStats{}
	dom := make([]int, len(t.Backends))
	for i, b := range t.Backends {
		d, ok := index[b.Domain]
		if !ok {
			d = len(st.Domains)
			index[b.Domain] = d
			st.Domains = append(st.Domains, DomainShare{Name: b.Domain})
		}
		dom[i] = d
		st.Domains[d].Backends++
	}
	if len(st.Domains) < 2 {
		return nil
	}
	goodIn := make([]bool, len(st.Domains))
	for i, b := range t.Backends {
		if b.Good() {
			goodIn[dom[i]] = true
		}
	}
	for _, r := range t.Rows {
		dp, ds := dom[r.Primary], dom[r.Secondary]
		st.Domains[dp].PrimaryRows++
		if dp != ds {
			continue
		}
		st.SameDomain++
		st.Domains[dp].Orphaned++
		for d, g := range goodIn {
			if g && d != dp {
				st.Conflicts++
				break
			}
		}
	}
	return st
}
