package loader

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/xdpbuild"
)

// BackendDir is where the backend program is pinned: beside the director's
// default directory, so a host can run both.
const BackendDir = "/sys/fs/bpf/director-backend"

// BackendCounterNames are the backend program's counters, by index: enum
// be_counter's in bpf/backend.c.
func BackendCounterNames() []string { return abi.BackendCounterNames }

// BackendProgram is the backend host's program (not a table.Backend, a
// server): GUE decapsulation with GLB's second chance (bpf/backend.c).
type BackendProgram struct {
	Dir string
	// Repaired says what LoadBackend put right of the pins it found.
	Repaired []string
	maps     bpf.BackendPinned
	progs    bpf.BackendPrograms
}

// LoadBackend loads the backend program into dir (pinned, adopting what is
// there), or privately with dir "". It takes the director's path
// (pinnedLoad): under dir's lock, and a program of another version
// replaces the pinned one on every attached interface.
func LoadBackend(dir string) (*BackendProgram, error) {
	raiseMemlock()
	spec, err := xdpbuild.Backend()
	if err == nil {
		err = bpf.CaptureAsMap(spec)
	}
	if err != nil {
		return nil, err
	}
	b := &BackendProgram{Dir: dir}
	l := &pinnedLoad{
		kind:     KindBackend,
		dir:      dir,
		what:     "the backend program",
		restart:  fmt.Sprintf("run 'director backend unload --backend-bpffs %s', which stops decapsulating, then attach again", dir),
		spec:     spec,
		pinned:   mapNames[bpf.BackendPinned](),
		counters: []string{bpf.BackendMapBeStats, bpf.BackendMapCaptureCpu},
		maps:     &b.maps,
		progs:    &b.progs,
		prog:     &b.progs.Backend,
	}
	err = l.run()
	b.Repaired = l.repaired
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Close releases this process's handles.
func (b *BackendProgram) Close() error { return errors.Join(b.progs.Close(), b.maps.Close()) }

// Prog is the backend program.
func (b *BackendProgram) Prog() *ebpf.Program { return b.progs.Backend }

// SetSelf sets the addresses forwarded packets leave from: this host's,
// one of each family at most (IPv6 for GUE over IPv6).
func (b *BackendProgram) SetSelf(self ...netip.Addr) error { return b.configure(self, true) }

// DisableSecondChance makes the program decapsulate every packet, never
// forwarding: what a backend without GLB's proxy logic does ('backend
// attach --no-second-chance'), for testing, or an operator who must.
func (b *BackendProgram) DisableSecondChance(self ...netip.Addr) error {
	return b.configure(self, false)
}

// SecondChance reports whether the program forwards packets of unknown
// connections to the next hop (see DisableSecondChance).
func (b *BackendProgram) SecondChance() (bool, error) {
	var c abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &c); err != nil {
		return false, err
	}
	return c.NoSecondChance == 0, nil
}

func (b *BackendProgram) configure(selves []netip.Addr, secondChance bool) error {
	c := abi.BeConfig{Configured: 1}
	var have4, have6 bool
	for _, self := range selves {
		switch {
		case self.Is4() && !have4:
			c.SelfIp, have4 = nativeFromBE(self.As4()), true
		case self.Is6() && !self.Is4In6() && !have6:
			c.SelfIp6, have6 = self.As16(), true
		default:
			return fmt.Errorf("%s: one address of each family, IPv4 or IPv6", self)
		}
	}
	if !have4 && !have6 {
		return errors.New("no address to forward from")
	}
	if !secondChance {
		c.NoSecondChance = 1
	}
	return b.maps.BeCfg.Put(uint32(0), &c)
}

// Attach attaches the backend program to iface (pinned link).
func (b *BackendProgram) Attach(iface, mode string) (*Attachment, error) {
	if b.Dir == "" {
		return nil, errors.New("a private backend program cannot be attached")
	}
	return attachAdvised(b.Dir, b.progs.Backend, iface, mode)
}

// Detach removes the backend program from iface; idempotent. The program
// and its counters stay pinned (UnloadBackend removes them).
func (b *BackendProgram) Detach(iface string) error { return detachNamed(b.Dir, iface) }

// Accept sets the outer destinations GUE is accepted for besides the
// SetSelf addresses: this host's addresses, IPv4 (GLB's GUE) and IPv6
// (GUE over IPv6). It replaces the whole set.
func (b *BackendProgram) Accept(addrs []netip.Addr) error {
	want4, want6 := map[uint32]bool{}, map[[16]byte]bool{}
	for _, a := range addrs {
		if a.Is4() {
			want4[nativeFromBE(a.As4())] = true
		} else {
			want6[a.As16()] = true
		}
	}
	if n := int(b.maps.BeLocal.MaxEntries()); len(want4) > n || len(want6) > n {
		return fmt.Errorf("%d IPv4 and %d IPv6 addresses to accept GUE for, more than the %d of each the program holds", len(want4), len(want6), n)
	}
	if err := replaceSet(b.maps.BeLocal, want4); err != nil {
		return err
	}
	return replaceSet(b.maps.BeLocal6, want6)
}

// replaceSet makes m's keys want's.
func replaceSet[K comparable](m *ebpf.Map, want map[K]bool) error {
	var k K
	var v uint8
	var stale []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for k := range want {
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("accepting GUE for an address: %w", err)
		}
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// Accepted lists the outer destinations GUE is accepted for: the SetSelf
// addresses and those Accept set.
func (b *BackendProgram) Accepted() ([]netip.Addr, error) {
	seen := map[netip.Addr]bool{}
	var c abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &c); err == nil && c.Configured != 0 {
		if c.SelfIp != 0 {
			seen[addrFromNative(c.SelfIp)] = true
		}
		if a := netip.AddrFrom16(c.SelfIp6); !a.IsUnspecified() {
			seen[a] = true
		}
	}
	var k uint32
	var v uint8
	it := b.maps.BeLocal.Iterate()
	for it.Next(&k, &v) {
		seen[addrFromNative(k)] = true
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	var k6 [16]byte
	it6 := b.maps.BeLocal6.Iterate()
	for it6.Next(&k6, &v) {
		seen[netip.AddrFrom16(k6)] = true
	}
	if err := it6.Err(); err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}

// HostAddrs lists the addresses of this network namespace's interfaces
// GUE may be sent to: IPv4 (loopback's 127/8 left out) and IPv6 unicast
// that routers forward (not loopback or link-local).
func HostAddrs() ([]netip.Addr, error) {
	addrs, err := netlink.AddrList(nil, unix.AF_UNSPEC)
	// A dump that addresses changed under is incomplete: list again.
	for try := 0; try < 5 && errors.Is(err, netlink.ErrDumpInterrupted); try++ {
		addrs, err = netlink.AddrList(nil, unix.AF_UNSPEC)
	}
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
			continue
		}
		out = append(out, ip)
	}
	return out, nil
}

// InterfaceIPv6 is the first IPv6 address of an interface that routers
// forward: the backend's own for GUE over IPv6; invalid when it has none.
func InterfaceIPv6(iface string) netip.Addr {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return netip.Addr{}
	}
	addrs, err := netlink.AddrList(l, unix.AF_INET6)
	if err != nil {
		return netip.Addr{}
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.IsLinkLocalUnicast() && !ip.IsLoopback() {
			return ip
		}
	}
	return netip.Addr{}
}

// Attachments lists where the backend program is attached.
func (b *BackendProgram) Attachments() ([]Attachment, error) { return attachments(b.Dir) }

// Counters sums the backend counters over CPUs, by name.
func (b *BackendProgram) Counters() (map[string]uint64, error) {
	var per []abi.BeCounters
	if err := b.maps.BeStats.Lookup(uint32(0), &per); err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, c := range per {
		for i, n := range BackendCounterNames() {
			out[n] += c.C[i]
		}
	}
	return out, nil
}

// InterfaceIPv4 is the first IPv4 address of an interface: the default for
// the backend's own address.
func InterfaceIPv4(iface string) (netip.Addr, error) {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return netip.Addr{}, err
	}
	addrs, err := netlink.AddrList(l, unix.AF_INET)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no IPv4 address", iface)
}

// OpenBackend adopts the backend program pinned in dir without loading
// anything: for commands that only read, or detach.
func OpenBackend(dir string) (*BackendProgram, error) {
	if err := checkKind(dir, KindBackend); err != nil {
		return nil, err
	}
	b := &BackendProgram{Dir: dir}
	var err error
	if b.progs.Backend, err = ebpf.LoadPinnedProgram(filepath.Join(dir, pinProgram), nil); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no backend program is loaded at %s: %w", dir, ErrBackendNotLoaded)
		}
		return nil, privilegeError("reading the backend's pins in "+dir, err)
	}
	// Pins from before live capture have no capture maps; Capture says so.
	err = openPinned(dir, &b.maps, "capture", bpf.BackendMapCaptureEvents, bpf.BackendMapCaptureCpu)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("opening the backend's pinned maps: %w", err)
	}
	return b, nil
}

// BackendSetup is how 'backend attach' and 'backend run' set the backend
// program up on an interface.
type BackendSetup struct {
	Iface, Mode string
	// Self is the address forwarded packets leave from; invalid: the
	// interface's first IPv4 address (its IPv6 one for an IPv6-only
	// host). GUE over IPv6 leaves from the interface's IPv6 address, or
	// Self's when that is one.
	Self         netip.Addr
	SecondChance bool
}

// Selves are the addresses forwarded packets leave from, by s.
func (s BackendSetup) Selves() ([]netip.Addr, error) {
	addr, err := InterfaceIPv4(s.Iface)
	if a6 := InterfaceIPv6(s.Iface); err != nil && a6.IsValid() {
		addr, err = a6, nil // an IPv6-only backend
	}
	if s.Self.IsValid() {
		addr, err = s.Self, nil
	}
	if err != nil {
		return nil, err
	}
	selves := []netip.Addr{addr}
	if a6 := InterfaceIPv6(s.Iface); addr.Is4() && a6.IsValid() {
		selves = append(selves, a6)
	}
	return selves, nil
}

// Setup configures b as s says (its own addresses, second chance), makes
// it take GUE for the host's addresses, and attaches it: the one way
// both the command and the service set a backend up.
func (b *BackendProgram) Setup(s BackendSetup) (*Attachment, []netip.Addr, error) {
	selves, err := s.Selves()
	if err != nil {
		return nil, nil, fmt.Errorf("the backend's own address: %w", err)
	}
	if err := b.configure(selves, s.SecondChance); err != nil {
		return nil, nil, err
	}
	if _, _, err := b.FollowAddrs(); err != nil {
		return nil, nil, err
	}
	a, err := b.Attach(s.Iface, s.Mode)
	if err != nil {
		return nil, nil, err
	}
	return a, selves, nil
}

// FollowAddrs makes the program take GUE for the host's addresses as they
// are now, and says which were added and removed since it last did.
func (b *BackendProgram) FollowAddrs() (added, removed []netip.Addr, err error) {
	host, err := HostAddrs()
	if err != nil {
		return nil, nil, err
	}
	was := map[netip.Addr]bool{}
	var k uint32
	var v uint8
	it := b.maps.BeLocal.Iterate()
	for it.Next(&k, &v) {
		was[addrFromNative(k)] = true
	}
	var k6 [16]byte
	it6 := b.maps.BeLocal6.Iterate()
	for it6.Next(&k6, &v) {
		was[netip.AddrFrom16(k6)] = true
	}
	if err := errors.Join(it.Err(), it6.Err()); err != nil {
		return nil, nil, err
	}
	now := map[netip.Addr]bool{}
	for _, a := range host {
		now[a] = true
		if !was[a] {
			added = append(added, a)
		}
	}
	for a := range was {
		if !now[a] {
			removed = append(removed, a)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return nil, nil, nil
	}
	sort.Slice(removed, func(i, j int) bool { return removed[i].Less(removed[j]) })
	return added, removed, b.Accept(host)
}
