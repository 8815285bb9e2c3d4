package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/director/director/internal/picture"
	"github.com/director/director/table"
)

// writePicture draws panels into path (.png or .svg), written aside and
// renamed into place, and says where.
func writePicture(e *env, path string, panels []picture.Panel) error {
	err := table.WriteFileAtomic(path, 0o644, func(w io.Writer) error { return picture.Write(w, path, panels) })
	if err != nil {
		return fmt.Errorf("--picture: %w", err)
	}
	what := "tables"
	if len(panels) == 1 {
		what = "table"
	}
	fmt.Fprintf(e.stderr, "director: picture of %d %s written to %s\n", len(panels), what, path)
	return nil
}

// maxPanels is how many tables one picture draws: 32 grids of 256x256
// side by side are already 9,000 pixels wide. A config of more is drawn
// a table at a time (--table).
const maxPanels = 32

// pictureOpts are the --picture and --table flags of a command that draws.
type pictureOpts struct{ path, table *string }

func pictureFlags(fs *flag.FlagSet, usage string) pictureOpts {
	return pictureOpts{
		path:  fs.String("picture", "", usage),
		table: fs.String("table", "", "with --picture, draw only the table `NAME` (its name, or tables[i] for a table without one)"),
	}
}

// check checks the flags before any work is done.
func (p pictureOpts) check() error {
	if *p.path == "" {
		if *p.table != "" {
			return errors.New("--table NAME chooses the table --picture draws; give --picture FILE too")
		}
		return nil
	}
	return picture.CheckPath(*p.path)
}

// pick chooses which of the tables named names (DisplayName) the picture
// draws, among those of want (nil: all): the one --table names, whether
// wanted or not, or every wanted one, at most maxPanels.
func (p pictureOpts) pick(names []string, want func(i int) bool) ([]int, error) {
	if *p.table != "" {
		for i, n := range names {
			if n == *p.table {
				return []int{i}, nil
			}
		}
		return nil, fmt.Errorf("--table %q: no table of that name (%s)", *p.table, someNames(names))
	}
	var out []int
	for i := range names {
		if want == nil || want(i) {
			out = append(out, i)
		}
	}
	if len(out) > maxPanels {
		return nil, fmt.Errorf("--picture: %d tables to draw, and a picture holds %d: draw one at a time with --table NAME", len(out), maxPanels)
	}
	return out, nil
}

// someNames lists names for an error, the first few of many.
func someNames(names []string) string {
	const few = 5
	switch {
	case len(names) == 0:
		return "there are none"
	case len(names) <= few:
		return "the tables are " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("the tables are %s and %d more", strings.Join(names[:few], ", "), len(names)-few)
}

// tablePanels are tables drawn side by side, one palette for all: those
// p picks.
func tablePanels(p pictureOpts, tables []*table.Table) ([]picture.Panel, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = table.DisplayName(t.Name, i)
	}
	idx, err := p.pick(names, nil)
	if err != nil {
		return nil, err
	}
	pal := picture.PaletteFor(tables...)
	return picture.Panels(len(idx), func(j int) picture.Panel {
		i := idx[j]
		return picture.TablePanel(names[i], tables[i], pal)
	}), nil
}

// changePanels draw d, the change from old to new: a panel for each table
// that changed (every table, when none did), or the table p picks, verdict
// the word on it.
func changePanels(p pictureOpts, old, new []*table.Table, d *table.Diff, verdict string) ([]picture.Panel, error) {
	names := make([]string, len(d.Tables))
	changed := 0
	for i, td := range d.Tables {
		names[i] = td.Name
		if td.Status != table.StatusUnchanged {
			changed++
		}
	}
	idx, err := p.pick(names, func(i int) bool { return changed == 0 || d.Tables[i].Status != table.StatusUnchanged })
	if err != nil {
		return nil, err
	}
	pal := picture.PaletteFor(append(append([]*table.Table{}, old...), new...)...)
	return picture.Panels(len(idx), func(j int) picture.Panel {
		td := d.Tables[idx[j]]
		switch {
		case td.OldIndex < 0:
			return picture.AddedPanel(td.Name, new[td.NewIndex], pal)
		case td.NewIndex < 0:
			return picture.RemovedPanel(td.Name, old[td.OldIndex])
		}
		return picture.ChangePanel(td.Name, old[td.OldIndex], new[td.NewIndex], td.RowsAtRisk, pal, verdict)
	}), nil
}
