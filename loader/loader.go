// Package loader is everything of director that touches the kernel: it
// loads the XDP program and its maps, pins them under a bpffs directory,
// attaches and detaches interfaces, applies tables atomically, reads the
// live state and counters back, and runs packets through the program.
package loader

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/table"
)

// DefaultBPFFS is where a director pins its objects unless told otherwise.
const DefaultBPFFS = "/sys/fs/bpf/director"

// Pin names inside the bpffs directory.
const (
	pinProgram = "prog"
	pinLinks   = "links" // one pinned XDP link per interface
)

// ErrNotLoaded is returned when no director is pinned in the directory.
var ErrNotLoaded = errors.New("no director is loaded there (run 'director load')")

// Director is a loaded (or adopted) director: the program and its maps.
type Director struct {
	Dir  string
	Prog *ebpf.Program
	Maps bpf.DirectorPinned
	spec *ebpf.CollectionSpec

	// Repaired says what Load put right of the pins it found (a map pin
	// removed or replaced underneath), a line each.
	Repaired []string
	// noSpelling keeps prefix and port-range binds out of the exact table
	// (bindmap.ExactPoints): for tests of the group table and the trie.
	noSpelling bool

	// Clock is the time changes are made at (a history's entries expire
	// by it); nil: time.Now.
	Clock func() time.Time
	// QUICWindow is how long a plan that removes a QUIC-LB config from a
	// live table watches what the config carries, to judge whether it is
	// still in use; DefaultQUICWindow when 0.
	QUICWindow time.Duration
	// StateDir is where applies save the tables and their histories for
	// a restart of the host (histstate.go); "" saves nothing.
	StateDir string
	// StateWarnings say what was found there and left aside, a line each.
	StateWarnings []string

	// cache is what this process last wrote or read in the pins' slots,
	// shared by every Director of the process on the same directory (a
	// command opens it more than once).
	cache *slotCache
}

// slotCache is a directory's tables as this process last saw them.
type slotCache struct {
	// known holds, by slot, the table this process last wrote or read
	// there. A table read back equal to it is returned as that same
	// table, whose fingerprint is then computed once, not at every plan.
	knownMu sync.Mutex
	known   map[int]*table.Table
	// read holds, by slot, the kernel's bytes as this process last read
	// and decoded them, and what they decoded to: the same bytes again
	// are that table, without decoding them again (most of a live read of
	// 32 tables). What an apply wrote is always decoded when read back.
	read map[int]readSlotCache
}

var (
	cachesMu sync.Mutex
	caches   = map[string]*slotCache{}
)

// cacheFor is dir's slot cache in this process; a Director with no
// directory (its maps pinned nowhere) has one of its own.
func cacheFor(dir string) *slotCache {
	if dir == "" {
		return &slotCache{}
	}
	cachesMu.Lock()
	defer cachesMu.Unlock()
	c := caches[filepath.Clean(dir)]
	if c == nil {
		c = &slotCache{}
		caches[filepath.Clean(dir)] = c
	}
	return c
}

// dropCache forgets dir's slots (it was unloaded).
func dropCache(dir string) {
	cachesMu.Lock()
	delete(caches, filepath.Clean(dir))
	cachesMu.Unlock()
}

type readSlotCache struct {
	raw    *abi.Table
	quic   []mapimage.QUICImage // none for a table without QUIC-LB routing
	hist   *abi.History         // nil for a slot without a history map
	digest [32]byte
	lt     mapimage.LiveTable
}

func (d *Director) now() time.Time {
	if d.Clock != nil {
		return d.Clock()
	}
	return time.Now()
}

// Close releases this process's handles; pinned objects stay.
func (d *Director) Close() error {
	if d == nil {
		return nil
	}
	err := d.Maps.Close()
	if d.Prog != nil {
		err = errors.Join(err, d.Prog.Close())
	}
	return err
}

// pinnedMaps are the maps a director keeps across processes: all of its
// program's.
var pinnedMaps = mapNames[bpf.DirectorPinned]()

// directorSpec reads the BPF object loads use: the embedded one, unless a
// benchmark comparing two builds of the program (BenchmarkProgramAB) loads
// the other build's.
var directorSpec = embeddedSpec

// embeddedSpec is the director object of this kernel's build, parsed once a process (parsing the
// ELF is 5-10 ms, and a command may open the director more than once),
// each caller given its own copy to change.
func embeddedSpec() (*ebpf.CollectionSpec, error) {
	spec, err := parsedSpec()
	if err != nil {
		return nil, err
	}
	return spec.Copy(), nil
}

var parsedSpec = sync.OnceValues(xdpbuild.Director)

func collectionSpec() (*ebpf.CollectionSpec, error) {
	spec, err := directorSpec()
	if err == nil {
		err = bpf.CaptureAsMap(spec)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF object: %w", err)
	}
	return spec, nil
}

// Load loads the director into dir, or adopts what is there. Maps that are
// already pinned are reused, so tables and counters survive; a program that
// differs from the pinned one replaces it atomically on every attached
// interface. Load is idempotent.
//
// With dir "" it loads a private instance: nothing is pinned, and it lives
// as long as this process holds it (replays and tests use this).
func Load(dir string) (*Director, error) { return load(dir, nil) }

// LoadServing loads a private director (Load("")) and runs serve on it
// while the kernel verifies its program: the maps exist and are set up, so
// serve may fill them (Serve), but d.Prog is not set yet. Verifying takes
// 60-80 ms and filling the maps waits for RCU grace periods; a command
// that starts a private director to run packets through (replay) waits for
// the longer of the two rather than their sum. An error from serve fails
// the load. A private director only: a pinned one is loaded under its
// directory's lock, which an apply takes as well.
func LoadServing(serve func(d *Director) error) (*Director, error) { return load("", serve) }

func load(dir string, serve func(d *Director) error) (*Director, error) {
	raiseMemlock()
	spec, err := collectionSpec()
	if err != nil {
		return nil, err
	}
	var maps bpf.DirectorPinned
	var progs bpf.DirectorPrograms
	d := &Director{Dir: dir, spec: spec, cache: cacheFor(dir)}
	l := &pinnedLoad{
		kind:    KindDirector,
		dir:     dir,
		what:    "the XDP program",
		restart: fmt.Sprintf("run 'director unload --bpffs %s', which stops steering, then load, apply and attach again", dir),
		spec:    spec,
		pinned:  pinnedMaps,
		counters: []string{bpf.DirectorMapCounters, bpf.DirectorMapCaptureCpu, bpf.DirectorMapBackendTraffic, bpf.DirectorMapQuicStats,
			bpf.DirectorMapAesWork},
		maps:  &maps,
		progs: &progs,
		prog:  &progs.Director,
		setup: func() error {
			d.Maps = maps
			if err := d.createBindMaps(); err != nil {
				return err
			}
			if err := d.refreshConfig(); err != nil {
				return fmt.Errorf("updating the config entry: %w", err)
			}
			if err := d.adoptCounters(); err != nil {
				return err
			}
			if serve != nil {
				return serve(d)
			}
			return nil
		},
	}
	err = l.run()
	d.Repaired = l.repaired
	if err != nil {
		return nil, err
	}
	d.Prog = progs.Director
	return d, nil
}

// createBindMaps gives both bind generations their inner maps, once: an
// apply only ever changes their contents.
func (d *Director) createBindMaps() error {
	// Each outer-map update waits for an RCU grace period: the two
	// generations' are made at once, so that they wait together.
	return concurrently(2, func(i int) error {
		gen := uint32(i)
		var id ebpf.MapID
		err := d.Maps.Binds.Lookup(gen, &id)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		inner, err := ebpf.NewMap(d.spec.Maps[bpf.DirectorMapBinds].InnerMap)
		if err != nil {
			return fmt.Errorf("creating bind maps: %w", err)
		}
		defer inner.Close()
		if err := d.Maps.Binds.Put(gen, inner); err != nil {
			return fmt.Errorf("installing bind maps: %w", err)
		}
		return nil
	})
}

// concurrently runs f(0) to f(n-1) at once and returns their first error.
func concurrently(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// install pins prog as dir's program and returns the program dir now runs.
// If a program of another version is pinned there, every attached link is
// switched to prog first (a bpf_link update, atomic per interface), so no
// interface is ever without a program. If the same program is pinned, it
// is kept (interfaces know its ID), and prog is closed.
func install(dir string, prog *ebpf.Program) (*ebpf.Program, error) {
	path := filepath.Join(dir, pinProgram)
	old, err := ebpf.LoadPinnedProgram(path, nil)
	if err == nil {
		defer old.Close()
		oi, err1 := old.Info()
		ni, err2 := prog.Info()
		if err1 == nil && err2 == nil && oi.Tag == ni.Tag {
			clone, err := old.Clone()
			if err != nil {
				return nil, err
			}
			prog.Close()
			return clone, nil
		}
		if err := updateLinks(dir, prog); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading pinned program: %w", err)
	}
	tmp := path + "_new" // bpffs forbids dots in names
	os.Remove(tmp)
	if err := prog.Pin(tmp); err != nil {
		return nil, fmt.Errorf("pinning program: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("pinning program: %w", err)
	}
	return prog, nil
}

// Open adopts a director pinned in dir.
func Open(dir string) (*Director, error) {
	if err := checkKind(dir, KindDirector); err != nil {
		return nil, err
	}
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, pinProgram), nil)
	if err != nil {
		err = privilegeError("reading the pins in "+dir, err)
	}
	if errors.Is(err, os.ErrNotExist) {
		if _, private := privateMountNS(); private && !isBPFFS(filepath.Dir(dir)) {
			return nil, fmt.Errorf("%s: no director is loaded there: %w", dir,
				errPrivateMounts("where "+filepath.Dir(dir)+" is not a bpf filesystem, so what the host pinned cannot be seen"))
		}
		return nil, fmt.Errorf("%s: %w", dir, ErrNotLoaded)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dir, err)
	}
	spec, err := collectionSpec()
	if err != nil {
		prog.Close()
		return nil, err
	}
	d := &Director{Dir: dir, Prog: prog, spec: spec, cache: cacheFor(dir)}
	// Pins from before the group table (or the per-table QUIC counters,
	// or the AES work area) have none until 'load' upgrades them; their
	// program does not use one either.
	err = openPinned(dir, &d.Maps, bpf.DirectorMapBindGroups, bpf.DirectorMapQuicStats, bpf.DirectorMapAesWork)
	if err != nil {
		if bad, cerr := checkPins(dir, prog, pinnedMaps); cerr == nil && len(bad) > 0 {
			err = pinsError(dir, bad)
		}
		d.Close()
		return nil, err
	}
	if bad, err := checkPins(dir, prog, pinnedMaps); err != nil {
		d.Close()
		return nil, privilegeError("reading the pins in "+dir, err)
	} else if len(bad) > 0 {
		d.Close()
		return nil, pinsError(dir, bad)
	}
	return d, nil
}

// Unload detaches every interface and removes every pin in dir, of either
// program: what labs and tests clean up with. Unloading what is not loaded
// is not an error. It removes only what this project pins: a directory not
// on a bpffs, or holding anything else (a mistyped --bpffs), is refused
// with nothing removed or detached.
func Unload(dir string) error {
	_, err := unload(dir, KindNone)
	return err
}

// UnloadAs is Unload for the commands of one program (want): a pin
// directory of the other is refused with nothing done (WrongKindError),
// and loaded says whether anything was there to unload.
func UnloadAs(dir string, want PinKind) (loaded bool, err error) { return unload(dir, want) }

func unload(dir string, want PinKind) (bool, error) {
	st, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if !st.IsDir() {
		return false, fmt.Errorf("%s is not a directory, so not a director's pins: nothing removed (check --bpffs)", dir)
	}
	if !isBPFFS(dir) {
		return false, fmt.Errorf("%s is not on a bpf filesystem, so not a director's pins: nothing removed (check --bpffs)", dir)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return false, err
	}
	defer unlock()
	if want != KindNone {
		if err := checkKind(dir, want); err != nil {
			return false, err
		}
		if err := CheckNoRun(dir, "unload"); err != nil {
			return false, err
		}
	}
	kind := PinnedKind(dir)
	loaded := kind != KindNone
	ours, err := ownPins(dir)
	if err != nil {
		return false, err
	}
	for _, l := range ours.links {
		if err := detachPinned(l); err != nil {
			return false, err
		}
	}
	for _, p := range ours.files {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("removing %s: %w", p, err)
		}
	}
	for _, d := range ours.dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("removing %s: %w", d, err)
		}
	}
	dropCache(dir)
	if kind == KindDirector {
		// What it served is no one's now: not to be taken up again.
		forgetSaved(StateDirFromEnv(), dir)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("removing %s: %w", dir, err)
	}
	return loaded, nil
}

// pinSet is what a pin directory holds of this project's: link pins,
// other pins, and directories (innermost first), as paths.
type pinSet struct{ links, files, dirs []string }

// ownPins lists dir's pins, or refuses dir, naming what in it this project
// never pins: Unload removes exactly this list.
func ownPins(dir string) (pinSet, error) {
	var s pinSet
	known := map[string]bool{pinProgram: true}
	for _, n := range append(slices.Clone(pinnedMaps), mapNames[bpf.BackendPinned]()...) {
		known[n] = true
	}
	// Interrupted replacements leave these beside a pin (bpffs forbids dots).
	for n := range maps.Clone(known) {
		known[n+"_new"], known[n+"_repair"] = true, true
	}
	var foreign []string
	entries, err := os.ReadDir(dir)
	if err != nil {
		return s, err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.Name() == pinLinks && e.IsDir():
			links, err := os.ReadDir(p)
			if err != nil {
				return s, err
			}
			for _, l := range links {
				if l.IsDir() {
					foreign = append(foreign, filepath.Join(pinLinks, l.Name())+"/")
				} else {
					s.links = append(s.links, filepath.Join(p, l.Name()))
				}
			}
			s.dirs = append(s.dirs, p)
		case e.Name() == pinRunLock && e.IsDir():
			if inner, _ := os.ReadDir(p); len(inner) > 0 {
				foreign = append(foreign, pinRunLock+"/"+inner[0].Name())
			}
			s.dirs = append(s.dirs, p)
		case known[e.Name()] && e.Type().IsRegular():
			s.files = append(s.files, p)
		default:
			name := e.Name()
			if e.IsDir() {
				name += "/"
			}
			foreign = append(foreign, name)
		}
	}
	if len(foreign) > 0 {
		if len(foreign) > 5 {
			foreign = append(foreign[:5], fmt.Sprintf("and %d more", len(foreign)-5))
		}
		return s, fmt.Errorf("%s holds what director never pins (%s): not a director's pin directory, nothing removed (check --bpffs)",
			dir, strings.Join(foreign, ", "))
	}
	if len(s.links)+len(s.files)+len(s.dirs) == 0 {
		return s, fmt.Errorf("%s holds no director pins: nothing removed (check --bpffs)", dir)
	}
	return s, nil
}

// Private loads a private instance (nothing pinned, never attached) that
// serves tables with the director config c, its gateway set: what replays
// and benchmarks run packets through, apart from any live director.
func Private(c *table.DirectorConfig, tables []*table.Table) (*Director, error) {
	d, err := Load("")
	if err != nil {
		return nil, err
	}
	if err := d.Serve(c, tables); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Serve makes a private instance (Load("")) serve tables with the
// director config c, its gateway set: Private in two steps, so that a
// caller can load the program (the verifier's work) while it builds the
// tables.
func (d *Director) Serve(c *table.DirectorConfig, tables []*table.Table) error {
	if d.Dir != "" {
		return errors.New("a pinned director changes only through Commit")
	}
	_, err := d.applyChange(change{Tables: tables, Config: c}, nil)
	return err
}
