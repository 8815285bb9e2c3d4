package loader

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/director/director/loader/xdpbuild"
)

// pinnedLoad is how both programs, the director and the backend, are
// loaded: into dir under its lock, the maps named in pinned pinned by name
// (adopted when already there) and assigned to maps, then progs assigned,
// the program verified while setup runs on the maps, then *prog installed
// as dir's program (install), replacing an older version on every attached
// interface. With dir "" nothing is pinned and the objects are private to
// this process. On error, maps and progs are closed.
//
// Before anything is created, every map pin is checked against the maps the
// pinned program uses: one removed or replaced underneath is pinned again
// from the program's own (what was done goes in repaired), so the maps
// adopted are always the datapath's, never a new empty one beside it.
type pinnedLoad struct {
	kind    PinKind // which program's pins dir must hold, if any
	dir     string
	what    string // "the XDP program", for errors
	restart string // how to start over when pinned maps have another layout
	spec    *ebpf.CollectionSpec
	pinned  []string
	maps    io.Closer      // a bpf2go maps struct
	progs   io.Closer      // a bpf2go programs struct
	prog    **ebpf.Program // the program in progs that dir pins
	setup   func() error   // run on the maps while the program verifies
	// counters are the pinned maps that hold only counts (or scratch
	// space): one made by a build with another layout (a counter added)
	// is made again, its counts from zero, rather than refusing the load.
	counters []string
	// retired are pins of maps earlier builds had and this one has not:
	// removed once this build's program is installed.
	retired []string

	repaired []string
}

func (l *pinnedLoad) run() (rerr error) {
	var opts ebpf.CollectionOptions
	if l.dir != "" {
		_, serr := os.Lstat(l.dir)
		if errors.Is(serr, os.ErrNotExist) {
			defer func() {
				if rerr != nil {
					os.RemoveAll(l.dir) // nothing of a failed first load stays behind
				}
			}()
		}
		unlock, err := l.prepare()
		if err != nil {
			return err
		}
		defer unlock()
		opts.Maps = ebpf.MapOptions{PinPath: l.dir}
	}
	if err := l.load(opts); err != nil {
		return err
	}
	if l.dir == "" {
		return nil
	}
	fail := func(err error) error {
		l.progs.Close()
		l.maps.Close()
		return err
	}
	p, err := install(l.dir, *l.prog)
	if err != nil {
		return fail(err)
	}
	*l.prog = p
	for _, name := range l.retired {
		if err := os.Remove(filepath.Join(l.dir, name)); err == nil {
			l.repaired = append(l.repaired, fmt.Sprintf("%s: an earlier build's map, unpinned", filepath.Join(l.dir, name)))
		} else if !errors.Is(err, os.ErrNotExist) {
			return fail(fmt.Errorf("loading %s: %w", l.what, err))
		}
	}
	if err := chmodPins(l.dir); err != nil {
		return fail(err)
	}
	return nil
}

// prepare makes and locks dir, marks the pinned maps for pinning and puts
// right the pins the pinned program's maps no longer have. On success the
// caller holds the lock until it calls unlock.
func (l *pinnedLoad) prepare() (unlock func(), err error) {
	if err := ensureDir(l.dir); err != nil {
		return nil, privilegeError("loading "+l.what+" into "+l.dir, err)
	}
	if unlock, err = lockDir(l.dir); err != nil {
		return nil, err
	}
	if err := checkKind(l.dir, l.kind); err != nil {
		unlock()
		return nil, err
	}
	for _, name := range l.pinned {
		l.spec.Maps[name].Pinning = ebpf.PinByName
	}
	if old, err := ebpf.LoadPinnedProgram(filepath.Join(l.dir, pinProgram), nil); err == nil {
		bad, err := checkPins(l.dir, old, l.pinned)
		old.Close()
		if err == nil {
			l.repaired, err = repairPins(bad)
		}
		if err != nil {
			unlock()
			return nil, fmt.Errorf("loading %s: checking the pins: %w", l.what, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		unlock()
		return nil, fmt.Errorf("loading %s: reading the pinned program: %w", l.what, err)
	}
	for _, name := range l.counters {
		if err := l.resetCounters(name); err != nil {
			unlock()
			return nil, err
		}
	}
	return unlock, nil
}

// resetCounters unpins the counters map name when its layout is not the
// spec's: the load then makes it again. The program pinned now keeps its
// own until the new one replaces it.
func (l *pinnedLoad) resetCounters(name string) error {
	path := filepath.Join(l.dir, name)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("loading %s: opening pinned map %s: %w", l.what, path, err)
	}
	defer m.Close()
	want := l.spec.Maps[name]
	if m.Type() == want.Type && m.KeySize() == want.KeySize && m.ValueSize() == want.ValueSize && m.MaxEntries() == want.MaxEntries {
		return nil
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("loading %s: %w", l.what, err)
	}
	l.repaired = append(l.repaired, fmt.Sprintf("%s: the counters were made by a build with another set of them; they start again from zero", path))
	return nil
}

// load creates (or adopts) the maps, then verifies the program while setup
// runs on them.
func (l *pinnedLoad) load(opts ebpf.CollectionOptions) error {
	// The maps first, every one of the object's (its data sections
	// included), so that the program can be given them all.
	mapSpec := l.spec.Copy()
	mapSpec.Programs = nil
	coll, err := ebpf.NewCollectionWithOptions(mapSpec, opts)
	if err != nil {
		return l.loadErr(err)
	}
	defer coll.Close() // what maps does not take
	// Assign takes maps out of coll.Maps: the program gets them from a
	// copy (and clones each).
	progOpts := ebpf.CollectionOptions{MapReplacements: maps.Clone(coll.Maps)}
	if err := coll.Assign(l.maps); err != nil {
		return l.loadErr(err)
	}
	// The verifier's work and setup's (map updates that wait for RCU grace
	// periods) at once.
	verified := make(chan error, 1)
	go func() { verified <- l.spec.LoadAndAssign(l.progs, &progOpts) }()
	var setupErr error
	if l.setup != nil {
		setupErr = l.setup()
	}
	if err := <-verified; err != nil {
		l.maps.Close()
		return explainLoad(l.spec, l.loadErr(err))
	}
	if setupErr != nil {
		l.progs.Close()
		l.maps.Close()
		return setupErr
	}
	return nil
}

func (l *pinnedLoad) loadErr(err error) error {
	if pe := privilegeError("loading "+l.what, err); pe != err {
		return pe
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("loading %s: %+v", l.what, ve)
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return fmt.Errorf("loading %s: the maps pinned under %s were made by a build with another layout "+
			"(%s): %w", l.what, l.dir, l.restart, err)
	}
	return fmt.Errorf("loading %s: %w", l.what, err)
}

// mapNames are the maps a bpf2go maps struct holds, by their ebpf tags
// (those of a struct it embeds included, as bpf.DirectorPinned embeds
// bpf2go's).
func mapNames[T any]() []string {
	var out []string
	for _, f := range mapFields(reflect.TypeFor[T](), nil) {
		out = append(out, f.Tag.Get("ebpf"))
	}
	return out
}

// mapFields are t's fields with an ebpf tag, and those of the structs it
// embeds, each with its index path (for reflect.Value.FieldByIndex).
func mapFields(t reflect.Type, at []int) []reflect.StructField {
	var out []reflect.StructField
	for i := range t.NumField() {
		f := t.Field(i)
		f.Index = append(slices.Clip(at), i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, mapFields(f.Type, f.Index)...)
		} else if f.Tag.Get("ebpf") != "" {
			out = append(out, f)
		}
	}
	return out
}

// openPinned opens, into each field of a bpf2go maps struct, the map
// pinned in dir under the field's ebpf tag. A map named in optional that is
// not pinned stays nil. On error, what was opened stays in dst for its
// Close.
func openPinned(dir string, dst any, optional ...string) error {
	v := reflect.ValueOf(dst).Elem()
	for _, f := range mapFields(v.Type(), nil) {
		name := f.Tag.Get("ebpf")
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) && slices.Contains(optional, name) {
			continue
		}
		if err != nil {
			return fmt.Errorf("opening pinned map %s: %w", name, err)
		}
		v.FieldByIndex(f.Index).Set(reflect.ValueOf(m))
	}
	return nil
}

// raiseMemlock lifts RLIMIT_MEMLOCK where this kernel charges BPF maps to
// it (before 5.11, which charges them to the memory cgroup instead), as
// cilium/ebpf's rlimit probes: creating a map with the limit at zero. On
// a kernel that charges the cgroup it changes nothing. It fails only
// where this process may not raise the limit, and the load then says
// what it lacks.
var raiseMemlock = xdpbuild.RaiseMemlock
