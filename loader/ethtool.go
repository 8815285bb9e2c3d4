package loader

import (
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// What a NIC's driver says of itself through ethtool's ioctl: its name,
// its queues, and its own counters (ethtool -i, -l and -S).

const (
	ethtoolGStrings  = 0x1b
	ethtoolGStats    = 0x1d
	ethtoolGChannels = 0x3c
	ethSSStats       = 1
	ethGStringLen    = 32
)

// ethtoolIoctl runs an ethtool command on iface, data being its struct.
func ethtoolIoctl(iface string, data unsafe.Pointer) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	}
	copy(ifr.name[:], iface)
	ifr.data = data
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&ifr)
	if errno != 0 {
		return errno
	}
	return nil
}

// driverOf is iface's driver, as ethtool -i names it ("virtio_net",
// "veth").
func driverOf(iface string) (string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, iface)
	if err != nil {
		return "", err
	}
	return unix.ByteSliceToString(info.Driver[:]), nil
}

// channels are a NIC's combined queues (ethtool -l): the most it has, and
// those in use.
type channels struct{ max, cur uint32 }

func channelsOf(iface string) (channels, error) {
	var c struct {
		cmd                                                                     uint32
		maxRx, maxTx, maxOther, maxCombined, rxCount, txCount, otherCount, comb uint32
	}
	c.cmd = ethtoolGChannels
	if err := ethtoolIoctl(iface, unsafe.Pointer(&c)); err != nil {
		return channels{}, err
	}
	return channels{max: c.maxCombined, cur: c.comb}, nil
}

// driverStats are iface's driver counters (ethtool -S) by name.
func driverStats(iface string) (map[string]uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, iface)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	n := info.N_stats
	if n == 0 {
		return map[string]uint64{}, nil
	}
	if n > 1<<14 {
		return nil, fmt.Errorf("%s's driver says it has %d counters", iface, n)
	}
	names := make([]byte, 12+int(n)*ethGStringLen)
	*(*uint32)(unsafe.Pointer(&names[0])) = ethtoolGStrings
	*(*uint32)(unsafe.Pointer(&names[4])) = ethSSStats
	*(*uint32)(unsafe.Pointer(&names[8])) = n
	if err := ethtoolIoctl(iface, unsafe.Pointer(&names[0])); err != nil {
		return nil, fmt.Errorf("reading %s's counter names: %w", iface, err)
	}
	vals := make([]uint64, 1+int(n))
	*(*uint32)(unsafe.Pointer(&vals[0])) = ethtoolGStats
	*(*uint32)(unsafe.Add(unsafe.Pointer(&vals[0]), 4)) = n
	if err := ethtoolIoctl(iface, unsafe.Pointer(&vals[0])); err != nil {
		return nil, fmt.Errorf("reading %s's counters: %w", iface, err)
	}
	// The kernel may have fewer to give than it said (a queue gone).
	got := min(n, *(*uint32)(unsafe.Add(unsafe.Pointer(&vals[0]), 4)))
	out := make(map[string]uint64, got)
	for i := 0; i < int(got); i++ {
		name := unix.ByteSliceToString(names[12+i*ethGStringLen : 12+(i+1)*ethGStringLen])
		out[name] = vals[1+i]
	}
	return out, nil
}

// queueCounter is a counter of one queue, as drivers name them:
// "rx_queue_3_xdp_drops" (veth, virtio_net before 6.x), "rx3_xdp_drops"
// (virtio_net since).
var queueCounter = regexp.MustCompile(`^(rx|tx)(?:_queue_)?_?(\d+)_(.+)$`)

// driverDrops are the driver's counters of frames it dropped, each queue's
// summed ("rx_queue_3_xdp_drops" counts in "rx_xdp_drops"), unless the
// driver gives the sum itself under that name (virtio_net since 6.x gives
// both).
func driverDrops(stats map[string]uint64) map[string]uint64 {
	out, queues := map[string]uint64{}, map[string]uint64{}
	for name, v := range stats {
		if !strings.Contains(name, "drop") {
			continue
		}
		if m := queueCounter.FindStringSubmatch(name); m != nil {
			queues[m[1]+"_"+m[3]] += v
			continue
		}
		out[name] = v
	}
	for name, v := range queues {
		if _, ok := out[name]; !ok {
			out[name] = v
		}
	}
	return out
}

// xdpTxAdvice says what a driver known to treat XDP_TX specially does with
// iface's queues, or "": virtio_net gives XDP_TX queues of its own only
// when the NIC has a queue pair for each possible CPU beyond those in use.
// With fewer, a kernel whose virtio_net predates its locked mode (2021)
// refuses native XDP (ENOMEM), and the others share the stack's queues
// under a lock, slower (docs/architecture.md, "Kernels": Debian 11's 5.10
// has the locked mode).
func xdpTxAdvice(iface string) string {
	drv, err := driverOf(iface)
	if err != nil || drv != "virtio_net" {
		return ""
	}
	ch, err := channelsOf(iface)
	if err != nil {
		return ""
	}
	cpus := uint32(possibleCPUs())
	if ch.max >= ch.cur+cpus {
		return ""
	}
	fix := fmt.Sprintf("give the NIC %d queue pairs or more (qemu: -netdev tap,queues=%d and -device virtio-net-pci,mq=on)",
		ch.cur+cpus, ch.cur+cpus)
	if ch.max > cpus {
		fix += fmt.Sprintf(", or let the stack use fewer (ethtool -L %s combined %d)", iface, ch.max-cpus)
	}
	return fmt.Sprintf("%s (virtio_net) has %d queue pairs, %d in use by the stack; XDP_TX wants %d more, one per CPU, to have "+
		"queues of its own: with fewer, XDP_TX goes through the stack's queues under a lock, slower (and a kernel whose "+
		"virtio_net predates that refuses native mode); %s", iface, ch.max, ch.cur, cpus, fix)
}
