package loader

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// What the kernel holds of the tables and their histories goes with the
// host when it restarts, while the backends keep their connections. So
// every table an apply writes is also saved, with its history, under
// StateDir (one file a table), and an apply onto a kernel that holds no
// table takes, for a table of the same name, the rows it had and its
// history as the earlier primaries. The files are a cache: each is
// checked (its own checksum, its version, sizes, indices, times) and one
// that does not check out is left aside with a warning (StateWarnings),
// never used.

// DefaultStateDir is where director keeps what must outlive a restart of
// the host (systemd's StateDirectory=director).
const DefaultStateDir = "/var/lib/director"

// StateDirFromEnv is DIRECTOR_STATE_DIR, or DefaultStateDir: where the
// commands and the service save what they apply.
func StateDirFromEnv() string {
	if d := os.Getenv("DIRECTOR_STATE_DIR"); d != "" {
		return d
	}
	return DefaultStateDir
}

// StateDirFor is where what is applied to the director pinned at bpffs is
// saved, under stateDir ("" for none).
func StateDirFor(stateDir, bpffs string) string {
	return (&Director{Dir: bpffs, StateDir: stateDir}).stateDir()
}

// HasSaved reports whether a table applied to the director pinned at
// bpffs is saved under stateDir.
func HasSaved(stateDir, bpffs string) bool {
	m, _ := filepath.Glob(filepath.Join(StateDirFor(stateDir, bpffs), "*.table"))
	return len(m) > 0
}

// forgetSaved removes what was saved of the director pinned at dir, under
// stateDir: it is unloaded, and what it served is no one's.
func forgetSaved(stateDir, dir string) {
	d := &Director{Dir: dir, StateDir: stateDir}
	if sd := d.stateDir(); sd != "" {
		os.RemoveAll(sd)
	}
}

// stateVersion is the saved tables' format.
const stateVersion = 1

// maxStateFile bounds what is read of a saved table: its rows and its
// history compress to well under this.
const maxStateFile = 64 << 20

// savedTable is a table as an apply left it live, and its history.
type savedTable struct {
	Version   int
	Written   int64 // Unix nanoseconds
	Name      string
	KeyCheck  [32]byte // keyCheck of its hash key: tells a new key without keeping it
	Backends  []netip.Addr
	Primaries []uint16 // by row, positions in Backends
	History   *table.History
}

// keyCheck is a digest of a hash key: equal for equal keys, and no use
// to one who wants the key (a 128-bit random secret behind SHA-256).
func keyCheck(k table.Key) [32]byte {
	return sha256.Sum256(append([]byte("director saved table key check v1\x00"), k[:]...))
}

// stateDir is where this director's tables are saved: StateDir, then a
// directory named by the pins' path (the pins' inode does not outlive a
// restart; their path does).
func (d *Director) stateDir() string {
	if d.StateDir == "" || d.Dir == "" {
		return ""
	}
	name := strings.Trim(strings.ReplaceAll(filepath.Clean(d.Dir), "/", "-"), "-")
	return filepath.Join(d.StateDir, "tables", name)
}

func stateFile(dir, name string) string { return filepath.Join(dir, name+".table") }

// saveTables saves what is live after an apply: each table written, with
// its history; files of tables no longer live go.
func (d *Director) saveTables(live []mapimage.LiveTable, written map[int]bool) error {
	dir := d.stateDir()
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	keep := map[string]bool{}
	for i, lt := range live {
		name := table.DisplayName(lt.Table.Name, i)
		keep[name+".table"] = true
		if !written[i] {
			if _, err := os.Stat(stateFile(dir, name)); err == nil {
				continue
			}
		}
		if err := saveTable(stateFile(dir, name), name, lt, d.now()); err != nil {
			return fmt.Errorf("saving %s: %w", name, err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

func saveTable(path, name string, lt mapimage.LiveTable, now time.Time) error {
	t := lt.Table
	st := savedTable{Version: stateVersion, Written: now.UnixNano(), Name: name, KeyCheck: keyCheck(t.HashKey), History: lt.History,
		Primaries: make([]uint16, len(t.Rows))}
	for _, b := range t.Backends {
		st.Backends = append(st.Backends, b.IP)
	}
	for r, row := range t.Rows {
		st.Primaries[r] = uint16(row.Primary)
	}
	var body bytes.Buffer
	if err := gob.NewEncoder(&body).Encode(&st); err != nil {
		return err
	}
	sum := sha256.Sum256(body.Bytes())
	return table.WriteFileAtomic(path, 0o600, func(w io.Writer) error {
		zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if err != nil {
			return err
		}
		if _, err := zw.Write(sum[:]); err != nil {
			return err
		}
		if _, err := zw.Write(body.Bytes()); err != nil {
			return err
		}
		return zw.Close()
	})
}

// restoredFor is, for each of tables with no live counterpart, the table
// of that name saved before a restart and its history, where one checks
// out. It is asked only when no table is live: after a restart of the
// host, or before the first apply.
func (d *Director) restoredFor(live []*table.Table, tables []*table.Table, now time.Time) map[string]table.Restored {
	dir := d.stateDir()
	if dir == "" || len(live) > 0 {
		return nil
	}
	out := map[string]table.Restored{}
	for i, t := range tables {
		name := table.DisplayName(t.Name, i)
		st, err := readSaved(stateFile(dir, name), name, now)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			d.StateWarnings = append(d.StateWarnings, fmt.Sprintf("%s: not used: %v", stateFile(dir, name), err))
			continue
		}
		old := &table.Table{Name: t.Name, HashKey: t.HashKey, Rows: make([]table.Row, table.Rows)}
		if st.KeyCheck != keyCheck(t.HashKey) {
			old.HashKey[0] ^= 1 // another key: Advance takes every row's for every row's
		}
		for _, ip := range st.Backends {
			old.Backends = append(old.Backends, table.Backend{IP: ip, State: table.StateActive, Healthy: true})
		}
		for r, p := range st.Primaries {
			old.Rows[r] = table.Row{Primary: uint32(p), Secondary: uint32(p)}
		}
		out[name] = table.Restored{Table: old, History: st.History}
	}
	return out
}

// readSaved reads and checks a saved table: a regular file of root's
// that no one else may write, whose checksum, version, name, sizes,
// indices and times hold.
func readSaved(path, name string, now time.Time) (*savedTable, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 || fi.Size() > maxStateFile {
		return nil, fmt.Errorf("not a regular file of mode 0600 under %d bytes (%s, %d bytes)", maxStateFile, fi.Mode(), fi.Size())
	}
	zr, err := gzip.NewReader(io.LimitReader(f, maxStateFile))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(zr, 4*maxStateFile))
	if err != nil {
		return nil, err
	}
	if len(raw) < 32 || sha256.Sum256(raw[32:]) != [32]byte(raw[:32]) {
		return nil, errors.New("its checksum does not hold")
	}
	var st savedTable
	if err := gob.NewDecoder(bytes.NewReader(raw[32:])).Decode(&st); err != nil {
		return nil, err
	}
	switch {
	case st.Version != stateVersion:
		return nil, fmt.Errorf("version %d, not %d", st.Version, stateVersion)
	case st.Name != name:
		return nil, fmt.Errorf("saved for table %q", st.Name)
	case st.Written > now.UnixNano():
		return nil, fmt.Errorf("written in the future (%s)", time.Unix(0, st.Written).UTC().Format(time.RFC3339))
	case len(st.Primaries) != table.Rows || len(st.Backends) == 0 || len(st.Backends) > table.MaxBackends:
		return nil, fmt.Errorf("%d rows, %d backends", len(st.Primaries), len(st.Backends))
	}
	for _, p := range st.Primaries {
		if int(p) >= len(st.Backends) {
			return nil, errors.New("a row names no backend")
		}
	}
	if err := checkHistory(st.History, st.Written); err != nil {
		return nil, err
	}
	return &st, nil
}

// checkHistory holds a saved history to what Advance makes: entries that
// name its backends and epochs, epochs no later than the longest window
// after it was written, hops among the row's record.
func checkHistory(h *table.History, written int64) error {
	if h.Empty() {
		return nil
	}
	if len(h.Rows) != table.Rows || (h.Hops != nil && len(h.Hops) != table.Rows) || len(h.Expires) > table.HistoryEpochs ||
		len(h.Backends) > 2*table.MaxBackends || h.MaxHops > table.HistoryHops {
		return errors.New("its history is not one a table can hold")
	}
	for _, e := range h.Expires {
		if e > written+int64(table.MaxHistoryWindow) {
			return errors.New("its history keeps an entry past the longest window")
		}
	}
	for _, b := range h.Backends {
		if !b.IP.IsValid() {
			return errors.New("its history names no address")
		}
	}
	for r := range h.Rows {
		for _, e := range h.Rows[r] {
			if e.Backend == 0 {
				break
			}
			if int(e.Backend) > len(h.Backends) || int(e.Epoch) >= len(h.Expires) {
				return fmt.Errorf("row %d of its history names nothing it holds", r)
			}
		}
		if h.Hops == nil {
			continue
		}
		for _, b := range h.Hops[r] {
			if b == 0 {
				break
			}
			if !inRecord(h.Rows[r], b) {
				return fmt.Errorf("row %d of its history lists a hop its record does not hold", r)
			}
		}
	}
	return nil
}

func inRecord(row table.HistRow, b uint16) bool {
	for _, e := range row {
		if e.Backend == b {
			return true
		}
	}
	return false
}
