package change

import (
	"errors"
	"fmt"

	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// Input is a config or GLB binary read for the datapath: within the
// datapath's limits and parsed, its tables not built yet (a binary's are
// read as they are). It is the one way in for both kinds of caller:
// plan and apply (ForDatapath: Read, then Build against what is live),
// and the service, which reads a config once and builds it again, with
// Builders and its checks' health, each time that health changes.
type Input struct {
	Path   string
	Data   []byte        // the file's bytes, as read
	Config *table.Config // nil for a GLB binary
	binary *config.Source
}

// Read parses data, read from path, for the datapath. Its errors name the
// file and the place in it.
func Read(path string, data []byte) (*Input, error) {
	in := &Input{Path: path, Data: data}
	if table.IsGLBBinary(data) {
		src, err := config.ParseSource(path, data, mapimage.Limit)
		if err != nil {
			return nil, err
		}
		in.binary = src
		return in, nil
	}
	c, err := config.ParseLimit(data, mapimage.Limit)
	if err != nil {
		return nil, config.InFile(path, err)
	}
	in.Config = c
	return in, nil
}

// Against is what a config for the datapath is built against: the live
// state, which Live gives (it may take a while: Build asks for it while it
// reads), what a plan carries, and, for the service, its builders and the
// health its checks judge.
type Against struct {
	// Live gives the live tables and the health of a backend the config
	// leaves to the checks (its table's, its index, the table's config);
	// nil: nothing is live to take from, and such a config is refused
	// (unless Judge is given).
	Live func() (tables []*table.Table, health func(t, b int, tc *table.TableConfig) bool, err error)
	// Carried are the tables a plan built, with their rows, taken where
	// they check out and are sealed with Key (table.FromBuilt).
	Carried []table.BuiltRows
	Key     table.Sealer
	// Judge, for the service, sets a table's backends' health (and what
	// the service does with it) as its checks find it, before the table
	// is built: the config is then built as it is, health and all, and
	// Data is not rewritten.
	Judge func(i int, tc *table.TableConfig)
	// Builders, with Judge, builds each table incrementally from the
	// one built last (the service's health flips and edits).
	Builders *Builders
	// Reuse, with Judge and without Builders, gives the tables that need
	// no build (the live ones a step leaves as they are); nil: build.
	Reuse func(i int, tc *table.TableConfig) *table.Table
	// Holds is what the datapath can hold; nil: mapimage.CheckDatapath.
	// Tests give a smaller datapath.
	Holds func([]*table.Table) error
}

// ForDatapath reads a config or GLB binary (data, read from path) for
// the datapath and builds it (Read, then Build).
func ForDatapath(path string, data []byte, a Against) (src *config.Source, st Stats, filled bool, err error) {
	in, err := Read(path, data)
	if err != nil {
		return nil, st, false, err
	}
	return in.Build(a)
}

// Build builds in's tables and checks that the datapath can serve them. A
// live table the config's table builds into (its registry digest checked
// against its rows: table.Table.BuiltFrom) is taken as it is, and a table
// a plan carries (sealed by this host) is taken from its rows: only what
// the config changes is built. filled reports that the config left some
// health to the checks and it was taken from what is live (Data, then,
// is the config with it filled in). With a.Judge, the service's, Data is
// the config as read and Warnings are the config's own (it logged them
// as it read it).
func (in *Input) Build(a Against) (src *config.Source, st Stats, filled bool, err error) {
	switch {
	case in.binary != nil:
		src = in.binary
		if a.Live == nil {
			st.Full = len(src.Tables)
		}
	case a.Judge != nil:
		src, err = in.judged(a, &st)
	case a.Live == nil:
		if err = config.OneShot(in.Config); err != nil {
			return nil, st, false, config.InFile(in.Path, err)
		}
		src, err = config.BuildSource(in.Path, in.Data, in.Config, nil)
		st.Full = len(in.Config.Tables)
	default:
		src, filled, err = in.forLive(a, &st)
	}
	if err != nil {
		return nil, st, false, err
	}
	holds := a.Holds
	if holds == nil {
		holds = mapimage.CheckDatapath
	}
	if err := holds(src.Tables); err != nil {
		return nil, st, false, config.InFile(in.Path, err)
	}
	return src, st, filled, nil
}

// judged is Build for the service: each table with the health a.Judge
// gives it, through a.Builders or, without them, taken from a.Reuse.
func (in *Input) judged(a Against, st *Stats) (*config.Source, error) {
	src := &config.Source{Path: in.Path, Data: in.Data, Config: in.Config, Warnings: in.Config.Warnings}
	for i := range in.Config.Tables {
		tc := in.Config.Tables[i]
		a.Judge(i, &tc)
		var t *table.Table
		var err error
		switch {
		case a.Builders != nil:
			before := a.Builders.Stats
			t, _, err = a.Builders.Build(i, &tc)
			st.Full += a.Builders.Stats.Full - before.Full
			st.Incremental += a.Builders.Stats.Incremental - before.Incremental
		default:
			if a.Reuse != nil {
				t = a.Reuse(i, &tc)
			}
			if t != nil {
				st.Live++
				break
			}
			st.Full++
			t, err = table.Build(&tc)
		}
		if err != nil {
			return nil, config.InFile(in.Path, fmt.Errorf("tables[%d]: %w", i, err))
		}
		src.Tables = append(src.Tables, t)
	}
	return src, nil
}

// forLive is Build against what is live. The live state is read while the
// config is filled in and built: the callbacks wait for it.
func (in *Input) forLive(a Against, st *Stats) (*config.Source, bool, error) {
	var live []*table.Table
	var health func(t, b int, tc *table.TableConfig) bool
	var lerr error
	ready := make(chan struct{})
	wait := func() { <-ready }
	defer wait()
	go func() {
		defer close(ready)
		live, health, lerr = a.Live()
	}()
	var err error
	src, filled, perr := config.BuildSourceReusing(in.Path, in.Data, in.Config, mapimage.Limit, func(i, j int, tc *table.TableConfig) bool {
		wait()
		if health == nil {
			if err = lerr; err == nil {
				err = errors.New("no live state to take health from")
			}
			return false
		}
		return health(i, j, tc)
	}, func(i int, tc *table.TableConfig) *table.Table {
		wait()
		if t := table.Replaced(live, tc, i); t != nil && t.BuiltFrom(tc) {
			st.Live++
			return t
		}
		if t := table.FromBuilt(a.Carried, i, tc, a.Key); t != nil {
			st.Carried++
			return t
		}
		st.Full++
		return nil
	})
	if err == nil {
		err = perr
	}
	return src, filled, err
}
