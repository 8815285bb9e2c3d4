package loader

import (
	"errors"
	"fmt"

	"github.com/director/director/table"
)

// The one path by which a change reaches the kernel, whoever asks: the
// plan and apply commands, and director run's loop. A change is planned
// (table.Plan: the diff against what is live and a verdict), judged by
// the caller, and applied under the apply lock against exactly the state
// it was planned against; then what the kernel holds is read back and
// checked against the plan.

// Proposal is a change to plan, and perhaps apply.
type Proposal struct {
	Tables []*table.Table
	// Input is the config or GLB binary the tables were built from, for
	// a plan file; nil when there is none (director run's health changes).
	Input []byte
	// Config, when not nil, is the director config to apply with the
	// tables, its gateway resolved.
	Config *table.DirectorConfig
}

// planAgainst judges p against the live state (table.NewPlan), after the
// checks an apply makes of it: a table whose backends' family the director
// config it would be served with (p's, or the live one) has no outbound
// source for cannot be served, so no plan says it can.
func (d *Director) planAgainst(live State, p *Proposal) (*table.Plan, error) {
	serving := p.Config
	if serving == nil {
		serving = live.Config
	}
	if err := checkSources(p.Tables, serving); err != nil {
		return nil, err
	}
	if live.QUICUse == nil {
		var err error
		if live.QUICUse, err = d.quicUse(live, p); err != nil {
			return nil, err
		}
	}
	return table.NewPlan(d.Dir, live.base(), live.Config, p.Tables, p.Input, p.Config)
}

// LiveState reads what is live: the tables and the director config.
func (d *Director) LiveState() (State, error) {
	live, err := d.Live()
	if err != nil {
		return State{}, err
	}
	c, err := d.LiveConfig()
	if err != nil {
		return State{}, err
	}
	return State{Tables: Tables(live), Config: c, Histories: Histories(live), Now: d.now(), statsIDs: statsIDs(live)}, nil
}

// Plan judges p against what is live now.
func (d *Director) Plan(p *Proposal) (*table.Plan, error) {
	live, err := d.LiveState()
	if err != nil {
		return nil, err
	}
	return d.PlanOn(live, p)
}

// PlanOn judges p against live, a state this director's LiveState gave:
// for a caller that built p from it (taking its unchanged tables), so that
// the plan's base is the state p was made from, read once.
func (d *Director) PlanOn(live State, p *Proposal) (*table.Plan, error) {
	if live.Restored == nil {
		live.Restored = d.restoredFor(live.Tables, p.Tables, live.Now)
	}
	return d.planAgainst(live, p)
}

// Commit plans p against what is live, under the apply lock, asks allow
// whether to apply it (a non-nil error refuses, and is returned; nil
// allows any plan), applies it, and checks that the tables and director
// config read back from the kernel are the ones planned. It returns the
// plan it applied. It is the one exported way to change the kernel's
// state, whoever asks.
func (d *Director) Commit(p *Proposal, allow func(live State, plan *table.Plan) error) (*table.Plan, *ApplyResult, error) {
	var plan *table.Plan
	res, err := d.applyChange(change{Tables: p.Tables, Config: p.Config}, func(live State) ([]*table.History, error) {
		var err error
		if plan, err = d.planAgainst(live, p); err != nil {
			return nil, err
		}
		if allow != nil {
			if err := allow(live, plan); err != nil {
				return nil, err
			}
		}
		return plan.Histories, nil
	})
	if err != nil {
		return plan, nil, err
	}
	if got := table.PlanTables(Tables(res.Tables)); !table.SamePlanTables(got, plan.Result) {
		return plan, res, errors.New("the tables read back from the kernel differ from the ones applied")
	}
	if p.Config != nil {
		now, err := d.LiveConfig()
		if err != nil {
			return plan, res, err
		}
		if now == nil || len(table.CompareDirectorConfig(now, p.Config)) > 0 {
			return plan, res, fmt.Errorf("the director config read back from the kernel differs from the one applied")
		}
	}
	return plan, res, nil
}
