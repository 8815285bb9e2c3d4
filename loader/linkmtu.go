package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// SyncLinkMTUs writes into the link_mtus map the MTU of each interface the
// director is attached to in this network namespace, and removes the
// entries of interfaces it no longer is. The single-buffer build reads it
// for the too-big check, having no bpf_check_mtu (bpf/toobig.h); it is
// kept on every build, so that a director's maps mean the same wherever
// they were made. Attach and Detach call it, and 'director run' on each
// netlink event and every interval, so an MTU changed under a service is
// followed within one event.
func (d *Director) SyncLinkMTUs() error {
	if d.Maps.LinkMtus == nil {
		return nil
	}
	have, err := d.Attachments()
	if err != nil {
		return fmt.Errorf("listing the attachments: %w", err)
	}
	keep := map[uint32]bool{}
	for _, a := range have {
		if a.Ifindex == 0 {
			continue
		}
		keep[a.Ifindex] = true // another namespace's too: its own service keeps it
		if a.State != StateAttached {
			continue
		}
		nl, err := netlink.LinkByIndex(int(a.Ifindex))
		if err != nil {
			return fmt.Errorf("reading %s's MTU: %w", a.Interface, err)
		}
		if err := d.Maps.LinkMtus.Put(a.Ifindex, uint32(nl.Attrs().MTU)); err != nil {
			return fmt.Errorf("recording %s's MTU: %w", a.Interface, err)
		}
	}
	var stale []uint32
	var k, v uint32
	it := d.Maps.LinkMtus.Iterate()
	for it.Next(&k, &v) {
		if !keep[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading link_mtus: %w", err)
	}
	for _, k := range stale {
		if err := d.Maps.LinkMtus.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing a detached interface's MTU: %w", err)
		}
	}
	return nil
}

// LinkMTUs is what link_mtus holds: each interface's MTU by ifindex.
func (d *Director) LinkMTUs() (map[uint32]uint32, error) {
	out := map[uint32]uint32{}
	if d.Maps.LinkMtus == nil {
		return out, nil
	}
	var k, v uint32
	it := d.Maps.LinkMtus.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	return out, it.Err()
}
