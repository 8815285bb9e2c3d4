package main

import (
	"fmt"
	"io"

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

// tablePanels are tables drawn side by side, one palette for all.
func tablePanels(tables []*table.Table) []picture.Panel {
	pal := picture.PaletteFor(tables...)
	return picture.Panels(len(tables), func(i int) picture.Panel {
		return picture.TablePanel(table.DisplayName(tables[i].Name, i), tables[i], pal)
	})
}

// changePanels draw d, the change from old to new: a panel for each table
// that changed (every table, when none did), verdict the word on it.
func changePanels(old, new []*table.Table, d *table.Diff, verdict string) []picture.Panel {
	pal := picture.PaletteFor(append(append([]*table.Table{}, old...), new...)...)
	var out, same []picture.Panel
	for _, td := range d.Tables {
		switch {
		case td.OldIndex < 0:
			out = append(out, picture.AddedPanel(td.Name, new[td.NewIndex], pal))
		case td.NewIndex < 0:
			out = append(out, picture.RemovedPanel(td.Name, old[td.OldIndex]))
		default:
			p := picture.ChangePanel(td.Name, old[td.OldIndex], new[td.NewIndex], td.RowsAtRisk, pal, verdict)
			if td.Status == table.StatusUnchanged {
				same = append(same, p)
			} else {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return same
	}
	return out
}
