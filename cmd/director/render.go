package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/director/director/table"
)

const barWidth = 20

// bar draws frac of full as a bar of barWidth cells, in half-cell steps.
func bar(frac float64) string {
	if frac < 0 {
		frac = 0
	}
	if frac > 1 {
		frac = 1
	}
	halves := int(frac*barWidth*2 + 0.5)
	s := strings.Repeat("█", halves/2)
	if halves%2 == 1 {
		s += "▌"
	}
	return s + strings.Repeat(" ", barWidth-(halves+1)/2)
}

func pct(rows int) string {
	return fmt.Sprintf("%5.1f%%", 100*float64(rows)/table.Rows)
}

func healthWord(h bool) string {
	if h {
		return "healthy"
	}
	return "unhealthy"
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func tableLabel(t *table.Table, i int) string {
	if t.Name != "" {
		return fmt.Sprintf("table %q (tables[%d])", t.Name, i)
	}
	return fmt.Sprintf("table tables[%d]", i)
}

// warnAll prints warnings about file, each naming it.
func warnAll(e *env, file string, ws []string) {
	for _, w := range ws {
		fmt.Fprintf(e.stderr, "director: warning: %s: %s\n", file, w)
	}
}
