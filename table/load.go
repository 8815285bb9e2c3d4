package table

import (
	"fmt"
	"os"
)

// Source is a set of tables read from a file: a JSON config (built here) or
// a GLB binary table (read as is).
type Source struct {
	Path     string
	Binary   bool
	Config   *Config // nil for binaries
	Tables   []*Table
	Warnings []string
}

// Load reads a config or a GLB binary, telling them apart by content.
func Load(path string) (*Source, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &Source{Path: path}
	if IsGLBBinary(data) {
		s.Binary = true
		if s.Tables, err = ReadGLB(data); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return s, nil
	}
	if s.Config, err = ParseConfig(data); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Tables, err = BuildAll(s.Config); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.Warnings = append(s.Warnings, s.Config.Warnings...)
	for i, t := range s.Tables {
		for _, w := range TableWarnings(t) {
			s.Warnings = append(s.Warnings, fmt.Sprintf("tables[%d]: %s", i, w))
		}
	}
	return s, nil
}
