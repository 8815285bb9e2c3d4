package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// A badPin is a map pin that is not the map the pinned program uses: gone
// (removed underneath) or another map (a new, empty one pinned in its
// place). Tools reading it would read what the datapath does not.
type badPin struct {
	name, path string
	want       ebpf.MapID // the program's map of that name
	got        ebpf.MapID // what is pinned; 0: nothing
}

func (b badPin) String() string { return b.path + " " + b.what() }

func (b badPin) what() string {
	if b.got == 0 {
		return fmt.Sprintf("is missing (the program uses map %d)", b.want)
	}
	return fmt.Sprintf("is map %d, which the program does not use (it uses map %d)", b.got, b.want)
}

// programMaps are the maps prog uses, by name as the kernel keeps it
// (BPF_OBJ_NAME_LEN: at most 15 bytes).
func programMaps(prog *ebpf.Program) (map[string]ebpf.MapID, error) {
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, errors.New("the kernel does not say which maps the program uses")
	}
	out := map[string]ebpf.MapID{}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			return nil, fmt.Errorf("map %d of the program: %w", id, err)
		}
		_, name, err := mapIDName(m)
		m.Close()
		if err != nil {
			return nil, err
		}
		out[name] = id
	}
	return out, nil
}

// bpfMapInfo is the head of the kernel's struct bpf_map_info, as far as
// mapIDName reads it; the kernel fills what info_len gives room for.
type bpfMapInfo struct {
	Type, ID, KeySize, ValueSize, MaxEntries, MapFlags uint32
	Name                                               [16]byte
}

// mapIDName is m's ID and name from BPF_OBJ_GET_INFO_BY_FD alone.
// ebpf.Map.Info also reads /proc/self/fdinfo for fields these checks do
// not use, which cost 1-2 ms a map: 20 ms of every command that opens
// the director.
func mapIDName(m *ebpf.Map) (ebpf.MapID, string, error) {
	var info bpfMapInfo
	attr := struct {
		fd, infoLen uint32
		info        uint64
	}{uint32(m.FD()), uint32(unsafe.Sizeof(info)), uint64(uintptr(unsafe.Pointer(&info)))}
	const bpfObjGetInfoByFD = 15
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfObjGetInfoByFD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(m)
	if errno != 0 {
		return 0, "", fmt.Errorf("reading map info: %w", errno)
	}
	return ebpf.MapID(info.ID), unix.ByteSliceToString(info.Name[:]), nil
}

func kernelName(name string) string {
	if len(name) > 15 {
		return name[:15]
	}
	return name
}

// checkPins lists the pins among names in dir that are not prog's own
// maps. A name prog has no map of (a map newer than the program) is not
// checked.
func checkPins(dir string, prog *ebpf.Program, names []string) ([]badPin, error) {
	own, err := programMaps(prog)
	if err != nil {
		return nil, err
	}
	var bad []badPin
	for _, name := range names {
		want, ok := own[kernelName(name)]
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		m, err := ebpf.LoadPinnedMap(path, nil)
		if errors.Is(err, os.ErrNotExist) {
			bad = append(bad, badPin{name, path, want, 0})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("opening pinned map %s: %w", path, err)
		}
		got, _, err := mapIDName(m)
		m.Close()
		if err != nil {
			return nil, err
		}
		if got != want {
			bad = append(bad, badPin{name, path, want, got})
		}
	}
	return bad, nil
}

// repairPins pins the program's own maps where bad says they are not: a
// wrong pin is replaced (renamed over, so the path always names a map),
// a missing one made again. It returns what it did, a line each.
func repairPins(bad []badPin) ([]string, error) {
	var done []string
	for _, b := range bad {
		m, err := ebpf.NewMapFromID(b.want)
		if err != nil {
			return done, fmt.Errorf("repairing %s: map %d: %w", b.path, b.want, err)
		}
		tmp := b.path + "_repair" // bpffs forbids dots in names
		os.Remove(tmp)
		err = m.Pin(tmp)
		m.Close()
		if err == nil {
			os.Chmod(tmp, 0o600)
			err = os.Rename(tmp, b.path)
		}
		if err != nil {
			os.Remove(tmp)
			return done, fmt.Errorf("repairing %s: %w", b.path, err)
		}
		done = append(done, fmt.Sprintf("repaired %s, which %s: it is the program's map again", b.path, strings.Replace(b.what(), "is ", "was ", 1)))
	}
	return done, nil
}

// pinsError is what a tool that only reads says of pins that are not the
// program's maps: the way to repair them.
func pinsError(dir string, bad []badPin) error {
	lines := make([]string, len(bad))
	for i, b := range bad {
		lines[i] = b.String()
	}
	return fmt.Errorf("%s: the pins are not the maps the datapath uses (removed or replaced underneath): %s; "+
		"'director load --bpffs %s' pins the program's own maps again, and changes nothing else", dir, strings.Join(lines, "; "), dir)
}

// RepairPins puts right, under the directory's lock, any pin of d's that
// is not the map its program uses, and the program's own pin if it is
// gone: what a running service does every interval, so that the tools
// never read maps the datapath does not use. It returns what it did.
func (d *Director) RepairPins() ([]string, error) {
	if d.Dir == "" {
		return nil, nil
	}
	unlock, err := lockDir(d.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var done []string
	path := filepath.Join(d.Dir, pinProgram)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := d.Prog.Pin(path); err != nil {
			return nil, fmt.Errorf("repairing %s: %w", path, err)
		}
		os.Chmod(path, 0o600)
		done = append(done, "repaired "+path+", which was missing: it is the running program again")
	}
	prog, err := ebpf.LoadPinnedProgram(path, nil)
	if err != nil {
		return done, fmt.Errorf("opening %s: %w", path, err)
	}
	defer prog.Close()
	bad, err := checkPins(d.Dir, prog, pinnedMaps)
	if err != nil {
		return done, err
	}
	more, err := repairPins(bad)
	return append(done, more...), err
}
