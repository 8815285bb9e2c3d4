package loader

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
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
		// Exact addresses, before prefixes (be_accept) took their place.
		retired: []string{"be_local", "be_local6"},
		maps:    &b.maps,
		progs:   &b.progs,
		prog:    &b.progs.Backend,
	}
	// A program replacing an earlier build's takes GUE for the host's
	// addresses from its first packet: its map of them is filled before
	// it is installed.
	l.setup = func() error {
		_, _, err := b.FollowAddrs()
		return err
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
// connections to the next hop: asked to (see DisableSecondChance), and
// told whom it may forward between (Trust).
func (b *BackendProgram) SecondChance() (bool, error) {
	var c abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &c); err != nil {
		return false, err
	}
	return c.NoSecondChance == 0 && c.TrustListed != 0, nil
}

// configure writes the program's settings; the trust list stays as Trust
// last set it.
func (b *BackendProgram) configure(selves []netip.Addr, secondChance bool) error {
	c := abi.BeConfig{Configured: 1}
	var have4, have6 bool
	for _, self := range selves {
		switch {
		case self.Is4() && !have4:
			c.SelfIp, have4 = mapimage.NativeFromBE(self.As4()), true
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
	var was abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &was); err != nil {
		return err
	}
	c.TrustListed = was.TrustListed
	return b.maps.BeCfg.Put(uint32(0), &c)
}

// Trust sets whom the program trusts: the only outer sources GUE is taken
// from, and the only next hops it is sent on to (the directors and the
// other backends). It replaces the list. With none, GUE is taken from any
// source and never sent on: a backend relays nothing for a host it was
// not told of.
func (b *BackendProgram) Trust(ps []netip.Prefix) error {
	var c abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &c); err != nil {
		return err
	}
	// The flag off before the list shrinks to nothing, on only once the
	// list is whole: never a moment of trusting what was not listed.
	if len(ps) == 0 && c.TrustListed != 0 {
		c.TrustListed = 0
		if err := b.maps.BeCfg.Put(uint32(0), &c); err != nil {
			return err
		}
	}
	if err := b.trust().replace(ps); err != nil {
		return err
	}
	if len(ps) > 0 && c.TrustListed == 0 {
		c.TrustListed = 1
		return b.maps.BeCfg.Put(uint32(0), &c)
	}
	return nil
}

// Trusted lists whom the program trusts (Trust), nil when it was given no
// list.
func (b *BackendProgram) Trusted() ([]netip.Prefix, error) {
	var c abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &c); err != nil {
		return nil, err
	}
	if c.TrustListed == 0 {
		return nil, nil
	}
	return b.trust().read()
}

func (b *BackendProgram) accept() prefixTries {
	return prefixTries{b.maps.BeAccept, b.maps.BeAccept6, "accepting GUE for"}
}

func (b *BackendProgram) trust() prefixTries {
	return prefixTries{b.maps.BeTrust, b.maps.BeTrust6, "trusting"}
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

// Accept sets the destinations GUE (outer and inner) is accepted for
// besides the SetSelf addresses: this host's local prefixes, IPv4 (GLB's
// GUE) and IPv6 (GUE over IPv6). It replaces the whole set.
func (b *BackendProgram) Accept(ps []netip.Prefix) error { return b.accept().replace(ps) }

// prefixTries are two of the program's LPM tries, one per family
// (be_accept and be_accept6, be_trust and be_trust6).
type prefixTries struct {
	v4, v6 *ebpf.Map
	what   string // for errors: "trusting" 10.0.0.0/8
}

func key4(p netip.Prefix) abi.BePrefix4 {
	return abi.BePrefix4{Prefixlen: uint32(p.Bits()), Addr: mapimage.NativeFromBE(p.Addr().As4())}
}

func key6(p netip.Prefix) abi.BePrefix6 {
	return abi.BePrefix6{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
}

// read lists the prefixes the tries hold, sorted.
func (t prefixTries) read() ([]netip.Prefix, error) {
	var out []netip.Prefix
	var k4 abi.BePrefix4
	var k6 abi.BePrefix6
	var v uint8
	it := t.v4.Iterate()
	for it.Next(&k4, &v) {
		out = append(out, netip.PrefixFrom(addrFromNative(k4.Addr), int(k4.Prefixlen)))
	}
	it6 := t.v6.Iterate()
	for it6.Next(&k6, &v) {
		out = append(out, netip.PrefixFrom(netip.AddrFrom16(k6.Addr), int(k6.Prefixlen)))
	}
	if err := errors.Join(it.Err(), it6.Err()); err != nil {
		return nil, err
	}
	slices.SortFunc(out, comparePrefix)
	return out, nil
}

// replace makes the tries hold want: the new prefixes put first, then the
// stale ones removed, so that a prefix in both the old set and the new is
// never missing.
func (t prefixTries) replace(want []netip.Prefix) error {
	want4, want6 := map[abi.BePrefix4]bool{}, map[abi.BePrefix6]bool{}
	for _, p := range want {
		p = p.Masked()
		if !p.IsValid() {
			return fmt.Errorf("%s %s: not a prefix", t.what, p)
		}
		if p.Addr().Is4() {
			want4[key4(p)] = true
		} else {
			want6[key6(p)] = true
		}
	}
	if n := int(t.v4.MaxEntries()); len(want4) > n || len(want6) > n {
		return fmt.Errorf("%s %d IPv4 and %d IPv6 prefixes: more than the %d of each the program holds", t.what, len(want4), len(want6), n)
	}
	return errors.Join(replaceSet(t.v4, want4, t.what), replaceSet(t.v6, want6, t.what))
}

// comparePrefix orders prefixes by address, then length.
func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// replaceSet makes m's keys want's.
func replaceSet[K comparable](m *ebpf.Map, want map[K]bool, what string) error {
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
			return fmt.Errorf("%s a prefix: %w", what, err)
		}
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// Accepted lists the destinations GUE is accepted for: the SetSelf
// addresses (as /32 and /128) and the prefixes Accept set.
func (b *BackendProgram) Accepted() ([]netip.Prefix, error) {
	out, err := b.accept().read()
	if err != nil {
		return nil, err
	}
	var c abi.BeConfig
	if err := b.maps.BeCfg.Lookup(uint32(0), &c); err == nil && c.Configured != 0 {
		if c.SelfIp != 0 {
			out = append(out, netip.PrefixFrom(addrFromNative(c.SelfIp), 32))
		}
		if a := netip.AddrFrom16(c.SelfIp6); !a.IsUnspecified() {
			out = append(out, netip.PrefixFrom(a, 128))
		}
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out), nil
}

// dumped is list's result, listed again while the kernel says the dump was
// interrupted (what it dumped changed meanwhile, so it may be incomplete:
// addresses and routes change at boot, as duplicate address detection ends
// and DHCP runs).
func dumped[T any](list func() ([]T, error)) ([]T, error) {
	out, err := list()
	for try := 0; try < 20 && errors.Is(err, netlink.ErrDumpInterrupted); try++ {
		time.Sleep(time.Duration(try) * time.Millisecond)
		out, err = list()
	}
	return out, err
}

// LocalPrefixes are what this network namespace's routing says is local
// (routes of type local, in any table): each address of its interfaces,
// and a whole prefix held on lo ('ip addr add 10.86.0.0/24 dev lo', or
// 'ip route add local ... dev lo'). Loopback's own (127/8, ::1) and
// IPv6 link-local ones are left out: GUE is never sent to them.
//
// Each address of an interface is taken too, local route or not yet: an
// IPv6 address gets its local route only once duplicate address detection
// is done (a second or so after it is added, or after its link comes up),
// and a 'backend attach' at boot must not miss the host's own address for
// good. One whose detection failed is left out.
func LocalPrefixes() ([]netip.Prefix, error) {
	filter := &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Type: unix.RTN_LOCAL}
	mask := netlink.RT_FILTER_TABLE | netlink.RT_FILTER_TYPE
	routes, err := dumped(func() ([]netlink.Route, error) { return netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, mask) })
	if err != nil {
		return nil, fmt.Errorf("listing the local routes: %w", err)
	}
	var out []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		ip = ip.Unmap()
		p := netip.PrefixFrom(ip, ones).Masked()
		if !p.IsValid() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
			continue
		}
		out = append(out, p)
	}
	addrs, err := dumped(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.Flags&unix.IFA_F_DADFAILED != 0 {
			continue
		}
		if ip = ip.Unmap(); ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return uncovered(out), nil
}

// uncovered is ps without those inside another of ps, sorted: a prefix on
// lo comes with local routes for its own address too, which it covers.
func uncovered(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Bits() - b.Bits() })
	var out []netip.Prefix
	for _, p := range ps {
		if !slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Contains(p.Addr()) }) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, comparePrefix)
	return out
}

// InterfaceIPv6 is the first IPv6 address of an interface that routers
// forward: the backend's own for GUE over IPv6; invalid when it has none.
func InterfaceIPv6(iface string) netip.Addr {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return netip.Addr{}
	}
	addrs, err := dumped(func() ([]netlink.Addr, error) { return netlink.AddrList(l, unix.AF_INET6) })
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
	addrs, err := dumped(func() ([]netlink.Addr, error) { return netlink.AddrList(l, unix.AF_INET) })
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
	// Trust lists the directors and the other backends: the only sources
	// GUE is taken from and next hops it is sent on to (Trust). Without
	// it, nothing is sent on, whatever SecondChance says.
	Trust []netip.Prefix
}

// Forwards says whether a program set up by s sends GUE on (second
// chance): asked to, and told whom it may send between.
func (s BackendSetup) Forwards() bool { return s.SecondChance && len(s.Trust) > 0 }

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

// Setup configures b as s says (its own addresses, second chance, whom
// it trusts), makes
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
	if err := b.Trust(s.Trust); err != nil {
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

// FollowAddrs makes the program take GUE for what the host's routing says
// is local now (LocalPrefixes), and says which prefixes were added and
// removed since it last did.
func (b *BackendProgram) FollowAddrs() (added, removed []netip.Prefix, err error) {
	host, err := LocalPrefixes()
	if err != nil {
		return nil, nil, err
	}
	had, err := b.accept().read()
	if err != nil {
		return nil, nil, err
	}
	was := map[netip.Prefix]bool{}
	for _, p := range had {
		was[p] = true
	}
	now := map[netip.Prefix]bool{}
	for _, p := range host {
		now[p] = true
		if !was[p] {
			added = append(added, p)
		}
	}
	for _, p := range had {
		if !now[p] {
			removed = append(removed, p)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return nil, nil, nil
	}
	return added, removed, b.Accept(host)
}
