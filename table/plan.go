package table

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// PlanVersion is the plan file's format version.
const PlanVersion = 1

// Plan is a reviewed change: the diff against the live tables it was
// computed from, a verdict, and the exact config to apply. Applying it is
// refused if the live tables are no longer the base it was computed
// against. It holds the config, keys included, so it is written mode 0600.
type Plan struct {
	PlanVersion int         `json:"plan_version"`
	Created     time.Time   `json:"created"`
	BPFFS       string      `json:"bpffs"`
	Base        []PlanTable `json:"base"`   // the live tables, in order
	Result      []PlanTable `json:"result"` // what the config builds
	Safe        bool        `json:"safe"`
	Reasons     []string    `json:"reasons"` // why it is unsafe
	Diff        *Diff       `json:"diff"`
	// Director is the director config change, when the plan was made
	// with one (--director-config); without, the live one stays.
	Director *DirectorPlan `json:"director_config,omitempty"`
	// Built are the tables this plan built, with their rows, sealed by
	// the host (CarryBuilt), so that applying it here takes them rather
	// than building them again (FromBuilt).
	Built  []BuiltRows     `json:"built,omitempty"`
	Config json.RawMessage `json:"config,omitempty"`
	// MadeFrom names the files the plan was made from, so that a plan
	// apply refuses can be made again by a command printed whole.
	MadeFrom *PlanFiles `json:"made_from,omitempty"`
	// ConfigGLB is the GLB binary exactly as reviewed (base64 in JSON),
	// when the plan was made from one rather than from a JSON config.
	ConfigGLB []byte `json:"config_glb,omitempty"`

	// Histories are the new tables' histories once the change is made
	// (CompareAt), for the apply that makes it; not kept in the file.
	Histories []*History `json:"-"`

	rawDiff json.RawMessage // the diff as read, decoded on demand (RawDiff)
}

// PlanFiles are the paths, absolute, of the files a plan was made from:
// its config and, when one was given, its director config.
type PlanFiles struct {
	Config         string `json:"config"`
	DirectorConfig string `json:"director_config,omitempty"`
}

// Input is the config or binary the plan applies, as reviewed.
func (p *Plan) Input() []byte {
	if len(p.ConfigGLB) > 0 {
		return p.ConfigGLB
	}
	return p.Config
}

// SetInput records what the plan applies: a JSON config, or a GLB binary.
func (p *Plan) SetInput(data []byte) {
	if IsGLBBinary(data) {
		p.ConfigGLB = data
		return
	}
	p.Config = json.RawMessage(data)
}

// NewPlan judges going from base (and baseConfig, the live director
// config) to tables (and config, when not nil) for the director pinned at
// bpffs: the diff, the verdict, and input, the config or binary the tables
// were built from (nil when there is none), to keep in the plan.
//
// The live tables are base's, with their histories and the time the
// change is judged at: the plan's Histories are the new tables' after it.
func NewPlan(bpffs string, b Base, baseConfig *DirectorConfig, tables []*Table, input []byte, config *DirectorConfig) (*Plan, error) {
	base := b.Tables
	d, hists := CompareAt(b, tables)
	safe, reasons := Verdict(d)
	if reasons == nil {
		reasons = []string{}
	}
	plan := &Plan{PlanVersion: PlanVersion, Created: time.Now().UTC().Truncate(time.Second), BPFFS: bpffs,
		Base: PlanTables(base), Result: PlanTables(tables), Safe: safe, Reasons: reasons, Diff: d, Histories: hists}
	if input != nil {
		plan.SetInput(input)
	}
	if config != nil {
		if err := plan.JudgeDirector(baseConfig, config); err != nil {
			return nil, err
		}
	}
	return plan, nil
}

// PlanTable identifies a table by name and fingerprint.
type PlanTable struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
}

// PlanTables lists tables as a plan records them.
func PlanTables(ts []*Table) []PlanTable {
	out := make([]PlanTable, len(ts))
	for i, t := range ts {
		out[i] = PlanTable{Name: t.Name, Fingerprint: Fingerprint(t)}
	}
	return out
}

// SamePlanTables reports whether two table lists are identical.
func SamePlanTables(a, b []PlanTable) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Verdict judges a diff: safe, or unsafe with reasons. Unsafe is anything
// that breaks established connections or stops steering traffic: rows at
// risk, more than one backend of a table draining or filling, rows with
// no good backend, a changed hash key, tables or binds removed, and QUIC
// connections stranded (a server ID changed, QUIC-LB routing changed or
// turned off).
func Verdict(d *Diff) (safe bool, reasons []string) {
	for _, td := range d.Tables {
		switch td.Status {
		case StatusRemoved:
			reasons = append(reasons, fmt.Sprintf("table %s is removed", td.Name))
			continue
		}
		// Rows at risk count only backends that are up: a backend the
		// checks found down is not a choice, its connections are lost
		// with it (HistoryRisk).
		if risk := td.Rows.AtRisk; risk > 0 {
			reasons = append(reasons, fmt.Sprintf("table %s: %d rows at risk (their connections break)", td.Name, risk))
		}
		if len(td.BindsRemoved) > 0 {
			reasons = append(reasons, fmt.Sprintf("table %s: binds removed: %v", td.Name, td.BindsRemoved))
		}
		// A new hash key moves flows between rows: safe only where every
		// row's chain holds every backend that was a primary anywhere in
		// the window (a small table with its history in the packets).
		if td.HashKeyChanged && td.Rows.AtRisk > 0 {
			reasons = append(reasons, fmt.Sprintf("table %s: hash_key changed", td.Name))
		}
		for _, s := range td.QUICStranded {
			reasons = append(reasons, fmt.Sprintf("table %s: %s", td.Name, s))
		}
		if td.Rows.NoGoodRows > 0 {
			reasons = append(reasons, fmt.Sprintf("table %s: %d rows have no active healthy backend as primary", td.Name, td.Rows.NoGoodRows))
		}
		// GLB's rule of one state change at a time: draining or filling
		// (what an operator sets). Health is what checks find, not a
		// choice, and the builder gives every row a good primary however
		// many backends are down; rows at risk and rows with no good
		// backend are what make a health change unsafe.
		moving := 0
		for _, bc := range td.Backends {
			if bc.New != nil && bc.New.State != "inactive" && bc.New.State != "active" {
				moving++
			}
		}
		// With the earlier primaries in the packets, drains and fills at
		// once strand nothing: the rule's reason is gone.
		if moving > 1 && !td.History.on() {
			reasons = append(reasons, fmt.Sprintf("table %s: %d backends draining or filling at once (GLB's safety rule allows one)", td.Name, moving))
		}
	}
	return len(reasons) == 0, reasons
}

// DirectorPlan is a reviewed director config change.
type DirectorPlan struct {
	// Base is the live director config the plan was made against (null
	// when none was live), and Result the one it applies, its gateway
	// resolved; both in GLB's director.conf JSON.
	Base    json.RawMessage `json:"base"`
	Result  json.RawMessage `json:"result"`
	Changes []SettingChange `json:"changes"`
}

// SetRawDiff keeps a plan's diff as read, undecoded (RawDiff decodes it).
func (p *Plan) SetRawDiff(raw json.RawMessage) { p.rawDiff = raw }

// RawDiff is the plan's diff: Diff, or the one SetRawDiff kept, decoded.
func (p *Plan) RawDiff() (*Diff, error) {
	if p.Diff != nil || len(p.rawDiff) == 0 {
		return p.Diff, nil
	}
	var d Diff
	if err := json.Unmarshal(p.rawDiff, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Changed reports whether the plan changes anything: a table or a
// director setting.
func (p *Plan) Changed() bool {
	return p.Diff.Changed || (p.Director != nil && len(p.Director.Changes) > 0)
}

// JudgeDirector adds the director config change to the plan's verdict.
func (p *Plan) JudgeDirector(old, new *DirectorConfig) error {
	res, err := new.MarshalGLB()
	if err != nil {
		return err
	}
	dp := &DirectorPlan{Base: json.RawMessage("null"), Result: res, Changes: CompareDirectorConfig(old, new)}
	if old != nil {
		if dp.Base, err = old.MarshalGLB(); err != nil {
			return err
		}
	}
	for _, c := range dp.Changes {
		if !c.Safe {
			p.Safe = false
			p.Reasons = append(p.Reasons, fmt.Sprintf("director config: %s %s -> %s: %s", c.Setting, c.Old, c.New, c.Reason))
		}
	}
	p.Director = dp
	return nil
}

// ChangeDiffers says how the change now, a diff of what is live against
// what a plan's config builds, differs from the change the plan recorded
// (reviewed), or "" when it is the same change: per table its status,
// fingerprints, key, binds added and removed, and each backend added,
// removed or changed with its state, health, weight and domain on each
// side. Row counts follow from those and are not compared.
func ChangeDiffers(reviewed, now *Diff) string {
	if reviewed == nil || now == nil {
		return "the plan records no diff"
	}
	if len(reviewed.Tables) != len(now.Tables) {
		return fmt.Sprintf("it changes %d tables, the plan %d", len(now.Tables), len(reviewed.Tables))
	}
	for i := range now.Tables {
		r, n := &reviewed.Tables[i], &now.Tables[i]
		switch {
		case r.Name != n.Name || r.Status != n.Status:
			return fmt.Sprintf("table %s is %s, the plan shows %s %s", n.Name, n.Status, r.Name, r.Status)
		case r.OldFingerprint != n.OldFingerprint || r.NewFingerprint != n.NewFingerprint:
			return fmt.Sprintf("table %s: its rows are not the ones the plan shows", n.Name)
		case r.HashKeyChanged != n.HashKeyChanged:
			return fmt.Sprintf("table %s: hash_key changed %v, the plan shows %v", n.Name, n.HashKeyChanged, r.HashKeyChanged)
		case !slices.Equal(r.BindsAdded, n.BindsAdded) || !slices.Equal(r.BindsRemoved, n.BindsRemoved):
			return fmt.Sprintf("table %s: binds added %v and removed %v, the plan shows %v and %v", n.Name,
				n.BindsAdded, n.BindsRemoved, r.BindsAdded, r.BindsRemoved)
		}
		if r.Brief || n.Brief || r.SameInputs || n.SameInputs {
			continue // unchanged on both sides (status and fingerprints above)
		}
		rb, nb := movedBackends(r.Backends), movedBackends(n.Backends)
		if len(rb) != len(nb) {
			return fmt.Sprintf("table %s: %d backends change, the plan shows %d", n.Name, len(nb), len(rb))
		}
		for k := range nb {
			if !sameBackendChange(rb[k], nb[k]) {
				return fmt.Sprintf("table %s: backend %s changes otherwise than the plan shows", n.Name, nb[k].IP)
			}
		}
	}
	return ""
}

func movedBackends(bs []BackendChange) []BackendChange {
	var out []BackendChange
	for _, b := range bs {
		if b.Change != "unchanged" {
			out = append(out, b)
		}
	}
	return out
}

func sameBackendChange(a, b BackendChange) bool {
	side := func(x, y *BackendSide) bool {
		if x == nil || y == nil {
			return x == y
		}
		return x.State == y.State && x.Healthy == y.Healthy && x.Weight == y.Weight && x.Domain == y.Domain
	}
	return a.IP == b.IP && a.Change == b.Change && side(a.Old, b.Old) && side(a.New, b.New)
}
