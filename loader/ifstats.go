package loader

import (
	"github.com/vishvananda/netlink"
)

// InterfaceStats is what the kernel counts on an attached interface. The
// datapath's counters say what the program decided; these say what became
// of it: a frame the program sent with XDP_TX and the driver could not
// send (a veth whose peer runs no XDP program drops every one) is counted
// encapsulated by the program and dropped here.
type InterfaceStats struct {
	Interface string `json:"interface"`
	RxPackets uint64 `json:"rx_packets"`
	RxDropped uint64 `json:"rx_dropped"`
	RxErrors  uint64 `json:"rx_errors"`
	TxPackets uint64 `json:"tx_packets"`
	TxDropped uint64 `json:"tx_dropped"`
	TxErrors  uint64 `json:"tx_errors"`
	// Driver is the interface's driver (ethtool -i), and DriverDrops its
	// own counters of frames it dropped (ethtool -S, those whose name
	// says drop, each queue's summed: virtio_net's rx_xdp_drops and
	// tx_xdp_tx_drops, say); none for a driver that keeps none.
	Driver      string            `json:"driver,omitempty"`
	DriverDrops map[string]uint64 `json:"driver_drops,omitempty"`
}

// InterfaceStats reads the link statistics of the interfaces the director
// is attached to in this network namespace (others cannot be read from
// here, and are left out).
func (d *Director) InterfaceStats() ([]InterfaceStats, error) {
	atts, err := d.Attachments()
	if err != nil {
		return nil, err
	}
	return interfaceStats(atts), nil
}

func interfaceStats(atts []Attachment) []InterfaceStats {
	out := []InterfaceStats{}
	for _, a := range atts {
		if a.State != StateAttached {
			continue
		}
		nl, err := netlink.LinkByIndex(int(a.Ifindex))
		if err != nil || nl.Attrs().Statistics == nil {
			continue
		}
		s := nl.Attrs().Statistics
		is := InterfaceStats{Interface: a.Interface, RxPackets: s.RxPackets, RxDropped: s.RxDropped, RxErrors: s.RxErrors,
			TxPackets: s.TxPackets, TxDropped: s.TxDropped, TxErrors: s.TxErrors}
		name := nl.Attrs().Name // the name now: the kernel's ioctls go by it
		is.Driver, _ = driverOf(name)
		if st, err := driverStats(name); err == nil {
			if drops := driverDrops(st); len(drops) > 0 {
				is.DriverDrops = drops
			}
		}
		out = append(out, is)
	}
	return out
}
