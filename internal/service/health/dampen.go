package health

// Dampener turns a backend's check results into its health, as GLB's
// trigger does: a backend that is up goes down after Fall consecutive
// failures, one that is down comes up after Rise consecutive passes.
// Before its first result a backend's health is unknown, and the first
// result decides it at once: the service runs a round of checks before
// its first apply, so that it starts from what the checks find.
type Dampener struct {
	Rise, Fall int
	up, known  bool
	run        int // consecutive results against the current state
}

// NewDampener starts a backend whose health is unknown.
func NewDampener(rise, fall int) *Dampener { return &Dampener{Rise: rise, Fall: fall} }

// StartAt starts d at a known health (an adopted table's).
func (d *Dampener) StartAt(up bool) { d.up, d.known, d.run = up, true, 0 }

// Known reports whether d has a health yet.
func (d *Dampener) Known() bool { return d.known }

// Up is the backend's health.
func (d *Dampener) Up() bool { return d.up }

// Observe takes one result and reports whether the health changed.
func (d *Dampener) Observe(ok bool) (changed bool) {
	if !d.known {
		d.up, d.known, d.run = ok, true, 0
		return true
	}
	if ok == d.up {
		d.run = 0
		return false
	}
	d.run++
	need := d.Fall
	if !d.up {
		need = d.Rise
	}
	if d.run >= need {
		d.up, d.run = ok, 0
		return true
	}
	return false
}
