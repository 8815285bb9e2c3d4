package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/loader/xdpmode"
)

// Attachment is an interface the director's program is attached to.
type Attachment struct {
	// Interface is the name it was attached by (its pin's name); a later
	// rename, or another namespace's interface of the same index, never
	// changes it.
	Interface string `json:"interface"`
	// State is attached (the interface is in this network namespace,
	// running the link's program), other-namespace (the link works, on an
	// interface this namespace does not have) or gone (the interface was
	// deleted, with its namespace perhaps: the link steers nothing, and
	// detach or unload removes it).
	State string `json:"state"`
	// Mode is native or generic; unknown unless attached here.
	Mode string `json:"mode"`
	// Switched is the mode an Attach switched away from ("" if none), and
	// Gap how long the interface then ran no program.
	Switched  string        `json:"-"`
	Gap       time.Duration `json:"-"`
	Ifindex   uint32        `json:"ifindex"`
	LinkID    uint32        `json:"link_id"`
	ProgramID uint32        `json:"program_id"`
	Pin       string        `json:"pin"`
	// Warnings are what this attachment's driver does that an operator
	// should know (xdpTxAdvice); set by Attach only.
	Warnings []string `json:"warnings,omitempty"`
}

// Attachment states.
const (
	StateAttached       = "attached"
	StateOtherNamespace = "other-namespace"
	StateGone           = "gone"
)

// XDP attach modes.
const (
	ModeNative  = xdpmode.Native
	ModeGeneric = xdpmode.Generic
)

func linkPin(dir, iface string) string { return filepath.Join(dir, pinLinks, iface) }

// Attach attaches the director's program to iface in mode (native or
// generic) through a pinned bpf_link, which outlives this process.
// Attaching an interface that is already attached in the same mode is not
// an error; in the other mode it switches: the kernel holds one mode at a
// time, so the old link goes and the new one comes, the interface running
// no program for the moment between (Attachment.Gap).
func (d *Director) Attach(iface, mode string) (*Attachment, error) {
	a, err := attachAdvised(d.Dir, d.Prog, iface, mode)
	if err != nil {
		return nil, err
	}
	if err := d.SyncLinkMTUs(); err != nil {
		return a, fmt.Errorf("attached to %s, but not ready for the too-big check: %w", iface, err)
	}
	return a, nil
}

// attachAdvised is attachPinned, with what the driver does to XDP_TX
// (xdpTxAdvice) in the error where it refused, or in the warnings.
func attachAdvised(dir string, prog *ebpf.Program, iface, mode string) (*Attachment, error) {
	a, err := attachPinned(dir, prog, iface, mode)
	if err != nil {
		if advice := xdpTxAdvice(iface); advice != "" && mode == ModeNative && errors.Is(err, unix.ENOMEM) {
			return nil, fmt.Errorf("%w (%s)", err, advice)
		}
		if why := singleBufferMTU(iface); why != "" && mode == ModeNative {
			return nil, fmt.Errorf("%w (%s)", err, why)
		}
		return nil, err
	}
	if a.Mode == ModeNative {
		if advice := xdpTxAdvice(iface); advice != "" {
			a.Warnings = append(a.Warnings, advice)
		}
	}
	return a, nil
}

// singleBufferMTU explains a native attach refused on the single-buffer
// build where iface's MTU needs frames of more than one buffer, which a
// driver without multi-buffer XDP refuses (veth: ERANGE, virtio_net:
// EINVAL); "" otherwise.
func singleBufferMTU(iface string) string {
	if b, _ := xdpbuild.Current(); b != xdpbuild.SingleBuffer {
		return ""
	}
	nl, err := netlink.LinkByName(iface)
	if err != nil || nl.Attrs().MTU <= 3000 {
		return ""
	}
	return fmt.Sprintf("this kernel has no multi-buffer XDP, so a driver runs a program natively only on frames of one buffer, "+
		"and %s's MTU is %d; lower it under about 3,500, or attach in generic mode, which takes any MTU", iface, nl.Attrs().MTU)
}

// attachPinned attaches prog to iface through a link pinned in dir/links.
func attachPinned(dir string, prog *ebpf.Program, iface, mode string) (*Attachment, error) {
	flags, err := xdpmode.Flags(mode)
	if err != nil {
		return nil, err
	}
	nl, err := netlink.LinkByName(iface)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("no interface %s in this network namespace (one in another is attached from there: "+
				"nsenter --net=/run/netns/NS director attach %s ...)", iface, iface)
		}
		return nil, fmt.Errorf("interface %s: %w", iface, err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	pin := linkPin(dir, iface)
	if a, err := readAttachment(pin, iface); err == nil {
		switch {
		case a.State == StateGone:
			// The interface it was for is gone: this is a new one.
			if err := detachPinned(pin); err != nil {
				return nil, err
			}
		case a.State == StateAttached && a.Mode != mode:
			return switchMode(pin, prog, iface, nl.Attrs().Index, a.Mode, mode, flags)
		case a.State == StateAttached:
			return a, nil
		default:
			return nil, fmt.Errorf("%s is attached through %s to an interface of that name in another network namespace; detach it there first", iface, pin)
		}
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: nl.Attrs().Index, Flags: flags})
	if err != nil {
		return nil, fmt.Errorf("attaching to %s in %s mode: %w%s", iface, mode, err, holder(iface, err))
	}
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return nil, fmt.Errorf("pinning link: %w", err)
	}
	os.Chmod(pin, 0o600)
	return readAttachment(pin, iface)
}

// switchMode replaces iface's link in mode from with one in mode to. If
// the new one cannot be made, the old mode is put back.
func switchMode(pin string, prog *ebpf.Program, iface string, ifindex int, from, to string, flags link.XDPAttachFlags) (*Attachment, error) {
	back, err := xdpmode.Flags(from)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := detachPinned(pin); err != nil {
		return nil, err
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	if err != nil {
		if old, berr := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: back}); berr == nil {
			defer old.Close()
			old.Pin(pin)
		}
		return nil, fmt.Errorf("switching %s from %s to %s mode: %w (it stays in %s mode)", iface, from, to, err, from)
	}
	gap := time.Since(start)
	defer l.Close()
	if err := l.Pin(pin); err != nil {
		return nil, fmt.Errorf("pinning link: %w", err)
	}
	os.Chmod(pin, 0o600)
	a, err := readAttachment(pin, iface)
	if err != nil {
		return nil, err
	}
	a.Switched, a.Gap = from, gap
	return a, nil
}

// VethWithoutXDPPeer reports whether iface is a veth whose peer this
// namespace can see and which runs no XDP program, or whose peer it
// cannot see: there, native XDP drops the frames the program sends back
// out (XDP_TX), which need the peer's NAPI, running only with its own XDP.
func VethWithoutXDPPeer(iface string) (bool, error) {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return false, err
	}
	if l.Type() != "veth" {
		return false, nil
	}
	peer := l.Attrs().ParentIndex
	if peer == 0 {
		return true, nil
	}
	var p netlink.Link
	if id := l.Attrs().NetNsID; id >= 0 {
		// The peer is in another namespace: ask for it there, by the id
		// this namespace knows that one by.
		p, err = linkInNetns(peer, id)
	} else {
		p, err = netlink.LinkByIndex(peer)
	}
	if err != nil {
		return true, nil // nothing says it runs XDP
	}
	x := p.Attrs().Xdp
	return x == nil || !x.Attached, nil
}

// linkInNetns reads link index of the namespace this one calls nsid
// (RTM_GETLINK with IFLA_TARGET_NETNSID, Linux 4.20).
func linkInNetns(index, nsid int) (netlink.Link, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_TARGET_NETNSID, nl.Uint32Attr(uint32(nsid))))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("%d answers for link %d of namespace %d", len(msgs), index, nsid)
	}
	return netlink.LinkDeserialize(nil, msgs[0])
}

// Detach removes the director from iface, or removes an attachment whose
// interface is gone. An interface with no attachment is an error that
// lists those there are: a typo must not read as done.
func (d *Director) Detach(iface string) error {
	if err := detachNamed(d.Dir, iface); err != nil {
		return err
	}
	return d.SyncLinkMTUs()
}

// ErrNotAttached is what detaching an interface with no attachment gives.
var ErrNotAttached = errors.New("not attached")

func detachNamed(dir, iface string) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	pin := linkPin(dir, iface)
	if _, err := os.Lstat(pin); errors.Is(err, os.ErrNotExist) {
		have, _ := attachments(dir)
		var names []string
		for _, a := range have {
			names = append(names, a.Interface+" ("+a.State+")")
		}
		what := "nothing is"
		if len(names) > 0 {
			what = strings.Join(names, ", ")
			if len(names) == 1 {
				what += " is"
			} else {
				what += " are"
			}
		}
		return fmt.Errorf("%s is %w: %s attached here", iface, ErrNotAttached, what)
	}
	return detachPinned(pin)
}

func detachPinned(pin string) error {
	l, err := link.LoadPinnedLink(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", pin, err)
	}
	defer l.Close()
	// Detached now, rather than when the link is released: the pin's
	// reference goes only after an RCU grace period, and until then an
	// attach to the interface finds its hook taken (seen on 5.10).
	if err := l.Detach(); err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("detaching %s: %w", pin, err)
	}
	// With the pin gone, closing the last handle releases the link, which
	// detaches the program where the kernel could not be asked to.
	return l.Unpin()
}

func readAttachment(pin, iface string) (*Attachment, error) {
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		return nil, err
	}
	a := &Attachment{Interface: iface, LinkID: uint32(info.ID), ProgramID: uint32(info.Program), Pin: pin, Mode: "unknown", State: StateGone}
	x := info.XDP()
	if x == nil || x.Ifindex == 0 { // the kernel detached it: its device went away
		return a, nil
	}
	a.Ifindex = x.Ifindex
	a.State = StateOtherNamespace
	// An interface of this index here is the link's only if it runs the
	// link's program: indexes repeat across namespaces.
	nl, err := netlink.LinkByIndex(int(x.Ifindex))
	if err != nil {
		return a, nil
	}
	xdp := nl.Attrs().Xdp
	if xdp == nil || !xdp.Attached || xdp.ProgId != a.ProgramID {
		return a, nil
	}
	a.State = StateAttached
	switch xdp.AttachMode {
	case 1: // XDP_ATTACHED_DRV
		a.Mode = ModeNative
	case 2: // XDP_ATTACHED_SKB
		a.Mode = ModeGeneric
	}
	return a, nil
}

// holder names the XDP program already on iface when an attach failed
// because the interface is taken, so that the operator knows whose it is.
func holder(iface string, err error) string {
	if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EEXIST) {
		return ""
	}
	nl, lerr := netlink.LinkByName(iface)
	if lerr != nil || nl.Attrs().Xdp == nil || !nl.Attrs().Xdp.Attached {
		return ""
	}
	id := nl.Attrs().Xdp.ProgId
	desc := fmt.Sprintf("program %d", id)
	if p, perr := ebpf.NewProgramFromID(ebpf.ProgramID(id)); perr == nil {
		if pi, ierr := p.Info(); ierr == nil {
			desc = fmt.Sprintf("program %d %q (tag %s)", id, pi.Name, pi.Tag)
		}
		p.Close()
	}
	return fmt.Sprintf(": %s already holds %s's XDP hook; detach it with the tool that attached it (bpftool net show dev %s)", desc, iface, iface)
}

// Attachments lists the interfaces the director is attached to.
func (d *Director) Attachments() ([]Attachment, error) { return attachments(d.Dir) }

func attachments(dir string) ([]Attachment, error) {
	entries, err := os.ReadDir(filepath.Join(dir, pinLinks))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []Attachment
	for _, e := range entries {
		a, err := readAttachment(filepath.Join(dir, pinLinks, e.Name()), e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Interface < out[j].Interface })
	return out, nil
}

// updateLinks points every interface attached through dir's links at
// prog, atomically per interface (bpf_link update).
func updateLinks(dir string, prog *ebpf.Program) error {
	entries, err := os.ReadDir(filepath.Join(dir, pinLinks))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		l, err := link.LoadPinnedLink(filepath.Join(dir, pinLinks, e.Name()), nil)
		if err != nil {
			return err
		}
		if info, ierr := l.Info(); ierr == nil && info.XDP() != nil && info.XDP().Ifindex == 0 {
			l.Close() // its interface is gone: there is nothing to upgrade
			continue
		}
		err = l.Update(prog)
		l.Close()
		if err != nil {
			return fmt.Errorf("replacing the program on %s: %w", e.Name(), err)
		}
	}
	return nil
}
