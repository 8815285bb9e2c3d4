// Package change is the one pipeline that turns a config into the tables
// to serve, building only what changed: against another config (diff),
// and for the datapath (Read, then Input.Build): against what is live and
// what a plan carries (plan and apply), or table by table, incrementally,
// with the health its checks find (the service, through Builders). It returns
// what it did (Stats) rather than keeping counts of its own. What is done
// with the tables (judged, applied, read back) is the loader's
// (Director.Commit): one path to the kernel.
package change

import (
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// Stats is what a pipeline did with each table: taken as it was (from
// what is live, from a plan's rows, from the other side of a diff), left
// unbuilt (the same inputs on both sides of a diff), or built, from
// nothing or incrementally.
type Stats struct {
	Live        int // live tables taken, their registry digest checked against their rows
	Carried     int // tables taken from a plan's rows, sealed with this host's key
	Other       int // tables of a diff's NEW taken from OLD, built from the same inputs
	Unbuilt     int // tables a diff left unbuilt: the same inputs on both sides
	Full        int // tables built from nothing
	Incremental int // tables rebuilt from a builder, one backend or health at a time
}

// Diff reads and builds a diff's two sides, OLD and NEW, each a config or
// a GLB binary. With skipSame, a table whose inputs are the same on both
// sides is left unbuilt (one unbuilt table on both sides: unchanged), and
// NEW's tables that OLD built from the same inputs are OLD's: only what
// changed is built.
func Diff(oldPath, newPath string, skipSame bool) (old, new *config.Source, st Stats, err error) {
	oldData, err := config.ReadInput(oldPath, table.ToolLimit)
	if err != nil {
		return nil, nil, st, err
	}
	newData, err := config.ReadInput(newPath, table.ToolLimit)
	if err != nil {
		return nil, nil, st, err
	}
	unbuilt := map[int]int{} // OLD's index -> NEW's, for tables not built
	var oldCfg, newCfg *table.Config
	if !table.IsGLBBinary(oldData) && !table.IsGLBBinary(newData) {
		if oldCfg, err = config.ParseConfigSource(oldPath, oldData, table.ToolLimit); err != nil {
			return nil, nil, st, err
		}
		if newCfg, err = config.ParseConfigSource(newPath, newData, table.ToolLimit); err != nil {
			return nil, nil, st, err
		}
		if skipSame {
			unbuilt = sameInputTables(oldCfg.Tables, newCfg.Tables)
		}
	}
	stubs := map[int]*table.Table{} // by NEW's index
	oldReuse := func(i int, tc *table.TableConfig) *table.Table {
		if j, ok := unbuilt[i]; ok {
			stubs[j] = table.UnbuiltTable(tc)
			st.Unbuilt++
			return stubs[j]
		}
		st.Full++
		return nil
	}
	if oldCfg != nil {
		old, err = config.BuildSource(oldPath, oldData, oldCfg, oldReuse)
	} else {
		old, err = config.ParseSource(oldPath, oldData, table.ToolLimit)
	}
	if err != nil {
		return nil, nil, st, err
	}
	newReuse := func(i int, tc *table.TableConfig) *table.Table {
		if t := stubs[i]; t != nil {
			return t
		}
		if t := table.Replaced(old.Tables, tc, i); t != nil && !t.Unbuilt && t.BuiltFrom(tc) {
			st.Other++
			return t
		}
		st.Full++
		return nil
	}
	if newCfg != nil {
		new, err = config.BuildSource(newPath, newData, newCfg, newReuse)
	} else {
		new, _, err = config.ParseSourceReusing(newPath, newData, table.ToolLimit, nil, newReuse)
	}
	if err != nil {
		return nil, nil, st, err
	}
	return old, new, st, nil
}

// sameInputTables pairs OLD's tables with NEW's as table.Compare does (by
// name when every table on both sides has one, else by position) and
// returns, by OLD's index, NEW's of the pairs with the same inputs.
func sameInputTables(old, new []table.TableConfig) map[int]int {
	named := func(ts []table.TableConfig) bool {
		for _, t := range ts {
			if t.Name == "" {
				return false
			}
		}
		return true
	}
	byName := named(old) && named(new)
	out := map[int]int{}
	for i := range old {
		for j := range new {
			if (byName && old[i].Name == new[j].Name) || (!byName && i == j) {
				if table.SameInputs(&old[i], &new[j]) {
					out[i] = j
				}
			}
		}
	}
	return out
}
