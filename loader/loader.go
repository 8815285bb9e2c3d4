// Package loader is everything of director that touches the kernel: it
// loads the XDP program and its maps, pins them under a bpffs directory,
// attaches and detaches interfaces, applies tables atomically, reads the
// live state and counters back, and runs packets through the program.
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
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf"
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
	Maps bpf.DirectorMaps
	spec *ebpf.CollectionSpec

	// Repaired says what Load put right of the pins it found (a map pin
	// removed or replaced underneath), a line each.
	Repaired []string
	// noSpelling keeps prefix and port-range binds out of the exact table
	// (layout.ExactPoints): for tests of the group table and the trie.
	noSpelling bool

	// known holds, by slot, the table this process last wrote or read
	// there. A table read back equal to it is returned as that same
	// table, whose fingerprint is then computed once, not at every plan.
	knownMu sync.Mutex
	known   map[int]*table.Table
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
var pinnedMaps = mapNames[bpf.DirectorMaps]()

// directorSpec reads the BPF object loads use: the embedded one, unless a
// benchmark comparing two builds of the program (BenchmarkProgramAB) loads
// the other build's.
var directorSpec = bpf.LoadDirector

func collectionSpec() (*ebpf.CollectionSpec, error) {
	spec, err := directorSpec()
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
// about 40 ms and filling the maps waits for RCU grace periods; a command
// that starts a private director to run packets through (replay) waits for
// the longer of the two rather than their sum. An error from serve fails
// the load. A private director only: a pinned one is loaded under its
// directory's lock, which an apply takes as well.
func LoadServing(serve func(d *Director) error) (*Director, error) { return load("", serve) }

func load(dir string, serve func(d *Director) error) (*Director, error) {
	spec, err := collectionSpec()
	if err != nil {
		return nil, err
	}
	var objs bpf.DirectorObjects
	d := &Director{Dir: dir, spec: spec}
	l := &pinnedLoad{
		dir:     dir,
		what:    "the XDP program",
		restart: fmt.Sprintf("run 'director unload --bpffs %s', which stops steering, then load, apply and attach again", dir),
		spec:    spec,
		pinned:  pinnedMaps,
		maps:    &objs.DirectorMaps,
		progs:   &objs.DirectorPrograms,
		prog:    &objs.Director,
		setup: func() error {
			d.Maps = objs.DirectorMaps
			if err := d.createBindMaps(); err != nil {
				return err
			}
			if err := d.refreshConfig(); err != nil {
				return fmt.Errorf("updating the config entry: %w", err)
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
	d.Prog = objs.Director
	return d, nil
}

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
	dir     string
	what    string // "the XDP program", for errors
	restart string // how to start over when pinned maps have another layout
	spec    *ebpf.CollectionSpec
	pinned  []string
	maps    io.Closer      // a bpf2go maps struct
	progs   io.Closer      // a bpf2go programs struct
	prog    **ebpf.Program // the program in progs that dir pins
	setup   func() error   // run on the maps while the program verifies

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
	return unlock, nil
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
	d := &Director{Dir: dir, Prog: prog, spec: spec}
	// Pins from before the group table have none until 'load' upgrades
	// them; their program does not read one either.
	err = openPinned(dir, &d.Maps, bpf.DirectorMapBindGroups)
	if err != nil {
		if bad, cerr := checkPins(dir, prog, pinnedMaps); cerr == nil && len(bad) > 0 {
			err = pinsError(dir, bad)
		}
		d.Close()
		return nil, err
	}
	if bad, err := checkPins(dir, prog, pinnedMaps); err != nil {
		d.Close()
		return nil, err
	} else if len(bad) > 0 {
		d.Close()
		return nil, pinsError(dir, bad)
	}
	return d, nil
}

// Unload detaches every interface and removes every pin in dir. Unloading
// what is not loaded is not an error.
func Unload(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	links, _ := os.ReadDir(filepath.Join(dir, pinLinks))
	for _, l := range links {
		if err := detachPinned(filepath.Join(dir, pinLinks, l.Name())); err != nil {
			unlock()
			return err
		}
	}
	unlock()
	return os.RemoveAll(dir)
}

// ensureDir makes dir on a bpffs, mounting bpffs at /sys/fs/bpf if that is
// where dir lives and nothing is mounted there. It refuses a bpffs that
// only this process's mount namespace sees (see checkPersistent).
func ensureDir(dir string) error {
	if !isBPFFS(filepath.Dir(dir)) {
		if filepath.Dir(dir) == "/sys/fs/bpf" || filepath.Clean(dir) == "/sys/fs/bpf" {
			if _, private := privateMountNS(); private {
				return errPrivateMounts("where /sys/fs/bpf is not a bpf filesystem; one mounted there, and everything pinned in it, " +
					"would be gone when the command exits")
			}
			if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, "mode=0700"); err != nil {
				return fmt.Errorf("mounting bpffs at /sys/fs/bpf: %w", err)
			}
		}
		if !isBPFFS(filepath.Dir(dir)) {
			return fmt.Errorf("%s is not on a bpf filesystem (mount -t bpf bpf DIR)", filepath.Dir(dir))
		}
	}
	if err := checkPersistent(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := checkOwned(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, pinLinks), 0o700); err != nil {
		return privilegeError("making "+dir, err)
	}
	return os.Chmod(dir, 0o700)
}

// checkOwned refuses a pin directory this user does not own, or that
// others may write: whoever can write it can move pins under the director
// (a failed load by a normal user once left one, into which root then
// loaded). A directory not there yet is fine.
func checkOwned(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		return fmt.Errorf("%s belongs to uid %d, not this user (uid %d): its owner could move pins under this director; "+
			"remove it (rm -r %s) if nothing of it is in use, or choose another --bpffs", dir, st.Uid, uid, dir)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %#o): anyone who can write it can move pins under this director; "+
			"chmod 0700 %s", dir, st.Mode&0o777, dir)
	}
	return nil
}

// privateMountNS reports whether this process runs in a mount namespace
// other than the host's, as 'ip netns exec' makes one for every command
// it runs, and returns a process in the host's (see hostProcess).
func privateMountNS() (host string, private bool) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return "", false
	}
	host = hostProcess()
	ns, err := os.Readlink("/proc/" + host + "/ns/mnt")
	return host, err == nil && ns != self
}

// hostProcess names a process in the host's mount namespace: init, or
// where init is not ours to inspect (a sandbox), the process that started
// this one ('ip netns exec' execs the command from the caller's).
func hostProcess() string {
	if _, err := os.Readlink("/proc/1/ns/mnt"); err == nil {
		return "1"
	}
	return fmt.Sprint(os.Getppid())
}

// checkPersistent refuses a bpffs at path that the host's mount namespace
// does not see: one mounted inside a private mount namespace, which goes,
// with everything pinned in it, when the namespace does (for 'ip netns
// exec', when the command exits). A bpffs the host also has mounted (seen
// through a bind mount or an inherited mount) is fine.
func checkPersistent(path string) error {
	host, private := privateMountNS()
	if !private {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil
	}
	data, err := os.ReadFile("/proc/" + host + "/mountinfo")
	if err != nil {
		return nil
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, line := range strings.Split(string(data), "\n") {
		// mountinfo: ID parent MAJOR:MINOR root mountpoint options ... - fstype source options
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == dev {
			return nil
		}
	}
	return errPrivateMounts("where " + path + " is a bpf filesystem the host does not see: everything pinned in it would be gone " +
		"when the command exits")
}

// errPrivateMounts explains why pinning in a private mount namespace is
// refused, and what to do instead; what completes "runs in a private mount
// namespace ...".
func errPrivateMounts(what string) error {
	return fmt.Errorf("this command runs in a private mount namespace (as 'ip netns exec' gives every command), %s. "+
		"Run it in the network namespace alone, keeping the host's mounts: nsenter --net=/run/netns/NAME director ... "+
		"(or mount bpffs at /sys/fs/bpf on the host first)", what)
}

func isBPFFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && uint32(st.Type) == unix.BPF_FS_MAGIC
}

// chmodPins makes every pinned object readable and writable by root only.
func chmodPins(dir string) error {
	return filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if e.IsDir() {
			mode = 0o700
		}
		return os.Chmod(p, mode)
	})
}

// lockDir serialises changes to a director: an exclusive flock on the pin
// directory itself (bpffs holds no regular files). The kernel drops it if
// the process dies, so a killed apply never leaves it stuck.
func lockDir(dir string) (unlock func(), err error) {
	if dir == "" { // a private instance: this process is its only user
		return func() {}, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
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

// mapNames are the maps a bpf2go maps struct holds, by their ebpf tags.
func mapNames[T any]() []string {
	t := reflect.TypeFor[T]()
	var out []string
	for i := range t.NumField() {
		if name := t.Field(i).Tag.Get("ebpf"); name != "" {
			out = append(out, name)
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
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("ebpf")
		if name == "" {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if errors.Is(err, os.ErrNotExist) && slices.Contains(optional, name) {
			continue
		}
		if err != nil {
			return fmt.Errorf("opening pinned map %s: %w", name, err)
		}
		v.Field(i).Set(reflect.ValueOf(m))
	}
	return nil
}
