package config

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/director/director/table"
)

// Input limits. They are checked before anything is built, so that input
// that will be refused is refused in milliseconds and costs memory in
// proportion to what is actually built.
const (
	// MaxConfigBytes bounds a JSON config file of up to 64 tables; a
	// reader of more tables takes TableJSONBytes a table (MaxJSONBytes).
	MaxConfigBytes = 16 << 20
	// TableJSONBytes is a table's share of MaxJSONBytes. A table of 256
	// binds and 256 backends with every field spelled out, weights,
	// checks and URIs, indented by four, is 147 KiB.
	TableJSONBytes = 256 << 10
	// MaxDirectorConfigBytes bounds a director config file, a few keys.
	MaxDirectorConfigBytes = 1 << 20
)

// MaxJSONBytes bounds a JSON config for a reader of lim.Tables tables:
// MaxConfigBytes, or TableJSONBytes a table when that is more (256 MiB
// for the table tools' 1,024). The service, which reads for the datapath,
// keeps the smaller bound: a file dropped in its way costs no more.
func MaxJSONBytes(lim table.Limit) int {
	return max(MaxConfigBytes, lim.Tables*TableJSONBytes)
}

// Source is a set of tables read from a file: a JSON config (built here) or
// a GLB binary table (read as is).
type Source struct {
	Path     string
	Binary   bool
	Data     []byte        // the file's bytes, as read
	Config   *table.Config // nil for binaries
	Tables   []*table.Table
	Warnings []string
}

// Load reads a config or a GLB binary, telling them apart by content.
func Load(path string) (*Source, error) { return LoadLimit(path, table.ToolLimit) }

// LoadLimit is Load for a reader that holds at most lim.Tables tables: a
// file with more is refused before any table is built.
func LoadLimit(path string, lim table.Limit) (*Source, error) {
	data, err := ReadInput(path, lim)
	if err != nil {
		return nil, err
	}
	return ParseSource(path, data, lim)
}

// ParseSourceHealth is ParseSource for a config that may leave health to
// the checks: such backends' health is health(table, backend) (the plan
// and apply commands take it from the live tables, where director run
// keeps what its checks find), and Data is the config with it filled in
// (FillHealth), so that a plan applies exactly what it shows. filled
// reports whether any was.
func ParseSourceHealth(path string, data []byte, lim table.Limit, health func(table, backend int, c *table.TableConfig) bool) (s *Source, filled bool, err error) {
	return ParseSourceReusing(path, data, lim, health, nil)
}

// ParseSourceReusing is ParseSourceHealth (health may be nil: then a
// config that leaves health to the checks is refused as ParseSource
// refuses it) where reuse gives the tables that need no build
// (table.BuildAllReusing).
func ParseSourceReusing(path string, data []byte, lim table.Limit, health func(table, backend int, c *table.TableConfig) bool,
	reuse func(i int, tc *table.TableConfig) *table.Table) (s *Source, filled bool, err error) {
	if table.IsGLBBinary(data) || health == nil {
		s, err = parseSource(path, data, lim, reuse)
		return s, false, err
	}
	c, err := ParseLimit(data, lim)
	if err != nil {
		return nil, false, InFile(path, err)
	}
	return BuildSourceReusing(path, data, c, lim, health, reuse)
}

// BuildSourceReusing is ParseSourceReusing of c, parsed from data (read
// from path) within lim, with health.
func BuildSourceReusing(path string, data []byte, c *table.Config, lim table.Limit, health func(table, backend int, c *table.TableConfig) bool,
	reuse func(i int, tc *table.TableConfig) *table.Table) (s *Source, filled bool, err error) {
	if !c.Checked() {
		// Parsed once: the config as it is is the one built.
		if err := OneShot(c); err != nil {
			return nil, false, InFile(path, err)
		}
		s, err = BuildSource(path, data, c, reuse)
		return s, false, err
	}
	if data, err = FillHealth(data, func(i, j int) bool { return health(i, j, &c.Tables[i]) }); err != nil {
		return nil, false, InFile(path, err)
	}
	s, err = parseSource(path, data, lim, reuse)
	return s, true, err
}

// ParseSource parses data, read from path, as a config or a GLB binary and
// builds its tables. Warnings include what the datapath cannot serve
// (Unservable), so that every command that reads a file says so.
func ParseSource(path string, data []byte, lim table.Limit) (*Source, error) {
	return parseSource(path, data, lim, nil)
}

func parseSource(path string, data []byte, lim table.Limit, reuse func(i int, tc *table.TableConfig) *table.Table) (*Source, error) {
	if table.IsGLBBinary(data) {
		s := &Source{Path: path, Data: data, Binary: true}
		var err error
		if s.Tables, err = table.ReadGLBLimit(data, lim); err != nil {
			return nil, InFile(path, err)
		}
		s.warn()
		return s, nil
	}
	c, err := ParseConfigSource(path, data, lim)
	if err != nil {
		return nil, err
	}
	return BuildSource(path, data, c, reuse)
}

// ParseConfigSource parses data, read from path, as a JSON config, without
// building its tables: for BuildSource, once the caller knows which need
// no build.
func ParseConfigSource(path string, data []byte, lim table.Limit) (*table.Config, error) {
	c, err := ParseLimit(data, lim)
	if err != nil {
		return nil, InFile(path, err)
	}
	if err := OneShot(c); err != nil {
		return nil, InFile(path, err)
	}
	return c, nil
}

// BuildSource is the source of c, parsed from data (ParseConfigSource),
// its tables built but those reuse gives (table.BuildAllReusing).
func BuildSource(path string, data []byte, c *table.Config, reuse func(i int, tc *table.TableConfig) *table.Table) (*Source, error) {
	s := &Source{Path: path, Data: data, Config: c}
	var err error
	if s.Tables, err = table.BuildAllReusing(c, reuse); err != nil {
		return nil, InFile(path, err)
	}
	s.Warnings = append(s.Warnings, c.Warnings...)
	s.warn()
	return s, nil
}

// warn adds the tables' warnings, and what the datapath cannot serve.
func (s *Source) warn() {
	var unservable []string
	for i, t := range s.Tables {
		s.Warnings, unservable = appendWarnings(s.Warnings, unservable, i, t)
	}
	s.Warnings = append(s.Warnings, unservable...)
}

// appendWarnings appends table i's own warnings to own, and what makes it
// unservable to unservable.
func appendWarnings(own, unservable []string, i int, t *table.Table) ([]string, []string) {
	for _, w := range table.TableWarnings(t) {
		own = append(own, fmt.Sprintf("tables[%d]: %s", i, w))
	}
	if u := table.UnservableWarning(i, t); u != "" {
		unservable = append(unservable, u)
	}
	return own, unservable
}

// BuildEach builds c's tables (parsed from path by ParseConfigSource) one
// at a time, in order, and gives each to use, which may keep what it needs
// of it and let the rest go: a build of 1,024 tables then holds a few
// tables' rows, not 512 MiB of them. It returns the warnings BuildSource
// would give, in its order; use's error stops it.
func BuildEach(path string, c *table.Config, use func(i int, t *table.Table) error) ([]string, error) {
	warnings := append([]string(nil), c.Warnings...)
	var unservable []string
	for i := range c.Tables {
		t, err := table.Build(&c.Tables[i])
		if err != nil {
			return nil, InFile(path, fmt.Errorf("tables[%d]: %w", i, err))
		}
		warnings, unservable = appendWarnings(warnings, unservable, i, t)
		if err := use(i, t); err != nil {
			return nil, err
		}
	}
	return append(warnings, unservable...), nil
}

// ReadInput reads a config or GLB binary, refusing a file larger than its
// kind may be before reading it: MaxConfigBytes for JSON, and for a binary
// the size of lim.Tables tables, with its table count checked from the
// header.
func ReadInput(path string, lim table.Limit) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	head, _ := br.Peek(table.GLBHeaderSize)
	max := int64(MaxJSONBytes(lim))
	what := "a JSON config"
	if table.IsGLBBinary(head) {
		if len(head) == table.GLBHeaderSize {
			if err := lim.Check(int64(binary.LittleEndian.Uint32(head[8:]))); err != nil {
				return nil, InFile(path, err)
			}
		}
		max = table.GLBHeaderSize + int64(lim.Tables)*table.GLBTableSize
		what = fmt.Sprintf("a GLB binary of at most %d tables", lim.Tables)
	}
	return readMax(f, br, path, max, what)
}

// readFileMax reads a file of at most max bytes.
func readFileMax(path string, max int64, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readMax(f, f, path, max, what)
}

func readMax(f *os.File, r io.Reader, path string, max int64, what string) ([]byte, error) {
	tooBig := func(size string) error {
		return InFile(path, fmt.Errorf("%s bytes; %s may be at most %d bytes (%d MiB)", size, what, max, max>>20))
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > max {
		return nil, tooBig(fmt.Sprint(fi.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, tooBig("more than " + fmt.Sprint(max))
	}
	return data, nil
}

// FileError is a problem in a named file. Every line of its message names
// the file, so that each problem of a list stands on its own line.
type FileError struct {
	Path string
	Err  error
}

// InFile wraps err as a FileError of path.
func InFile(path string, err error) error { return &FileError{Path: path, Err: err} }

func (e *FileError) Error() string {
	lines := strings.Split(e.Err.Error(), "\n")
	for i, l := range lines {
		lines[i] = e.Path + ": " + l
	}
	return strings.Join(lines, "\n")
}

func (e *FileError) Unwrap() error { return e.Err }

// ReadApplyInput reads what apply takes: a plan file, or a config or GLB
// binary as ReadInput does. A plan holds its config, and a binary in it is
// base64, so a plan may be larger than a config; a file that is not a plan
// is held to ReadInput's limits.
func ReadApplyInput(path string, lim table.Limit) ([]byte, error) {
	binMax := table.GLBHeaderSize + int64(lim.Tables)*table.GLBTableSize
	jsonMax := MaxJSONBytes(lim)
	data, err := readFileMax(path, int64(jsonMax)+binMax*4/3+1<<20, "a plan")
	if err != nil {
		return nil, err
	}
	if table.IsGLBBinary(data) {
		if int64(len(data)) > binMax {
			return nil, InFile(path, fmt.Errorf("%d bytes; a GLB binary of at most %d tables may be at most %d bytes", len(data), lim.Tables, binMax))
		}
		return data, nil
	}
	if len(data) > jsonMax && !startsPlan(data) {
		return nil, InFile(path, fmt.Errorf("%d bytes; a JSON config may be at most %d bytes (%d MiB)", len(data), jsonMax, jsonMax>>20))
	}
	return data, nil
}

// startsPlan reports whether data is a JSON object whose first key is
// plan_version, as plan files are written.
func startsPlan(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	t, err := dec.Token()
	return err == nil && t == "plan_version"
}

// OneShot refuses a config that leaves health to the checks: the one-shot
// commands run none, and would take every such backend for down.
func OneShot(c *table.Config) error {
	for i := range c.Tables {
		for j, b := range c.Tables[i].Backends {
			if b.Checked {
				return &table.FieldError{Path: fmt.Sprintf("tables[%d].backends[%d].healthy", i, j),
					Msg: "missing: health is left to the checks in this config: serve it with 'director run', which checks, " +
						"or fill it in with 'director healthcheck CONFIG -o CHECKED.json' and use that"}
			}
		}
	}
	return nil
}
