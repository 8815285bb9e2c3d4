// Package testrun is the director's test runs (BPF_PROG_TEST_RUN, as the
// kernel names them), kept apart from the loader's production path: it
// runs programs with BPF_PROG_RUN (one frame, a
// capture's worth in parallel, or live frames), measures their cost from
// the kernel's run-time statistics, generates traffic into veth pairs, and
// makes the private network namespaces, veth pairs and packet sockets that
// replay, bench and the tests work in. Everything it creates in a
// namespace goes with the namespace, whether the work succeeded or not.
package testrun

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// InNetns runs f on an OS thread moved into a new network namespace. When
// f returns the namespace, with every interface in it, goes.
func InNetns(f func() error) error {
	return onThread(func() error {
		ns, err := netns.New()
		if err != nil {
			return fmt.Errorf("creating a network namespace: %w", err)
		}
		defer ns.Close()
		return f()
	})
}

// NewNetns makes a network namespace, its loopback up, for Do to run in;
// the caller closes it.
func NewNetns() (ns netns.NsHandle, err error) {
	err = onThread(func() error {
		if ns, err = netns.New(); err != nil {
			return fmt.Errorf("creating a network namespace: %w", err)
		}
		if lo, err := netlink.LinkByName("lo"); err == nil {
			netlink.LinkSetUp(lo)
		}
		return nil
	})
	return ns, err
}

// Do runs f on an OS thread inside ns. Sockets f creates stay in that
// namespace wherever they are used later.
func Do(ns netns.NsHandle, f func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("entering a network namespace: %w", err)
		}
		return f()
	})
}

// onThread runs f on an OS thread of its own, locked to it. The thread goes
// back to the Go scheduler only once it is back in the namespace it started
// in; otherwise (or if f panics) it exits with the goroutine, so that no
// goroutine ever runs in a namespace it did not ask for.
func onThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("reading the thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		returned := false
		defer func() {
			if r := recover(); r != nil {
				errc <- fmt.Errorf("panic: %v", r)
			} else if !returned {
				// runtime.Goexit: a t.Fatal inside f. Said, so that the
				// caller does not wait for an answer that never comes.
				errc <- errors.New("the function run in the namespace exited its goroutine (t.Fatal there?)")
			}
		}()
		err = f()
		returned = true
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Veth creates a veth pair in the current namespace and sets both ends up.
func Veth(a, b string) error {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a, MTU: 1500}, PeerName: b}
	if err := netlink.LinkAdd(v); err != nil {
		return fmt.Errorf("creating veth %s/%s: %w", a, b, err)
	}
	for _, n := range []string{a, b} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

// Socket is an AF_PACKET socket on one interface.
type Socket struct {
	fd      int
	ifindex int
}

// Listen opens a raw packet socket bound to iface.
func Listen(iface string) (*Socket, error) {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, err
	}
	s := &Socket{fd: fd, ifindex: l.Attrs().Index}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: s.ifindex}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Close closes the socket.
func (s *Socket) Close() error { return unix.Close(s.fd) }

// Send transmits a whole frame out of the interface.
func (s *Socket) Send(frame []byte) error {
	return unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex, Halen: 6})
}

// ErrTimeout is returned by Recv when nothing matching arrived in time.
var ErrTimeout = errors.New("timed out")

// Recv returns the next frame received (not sent) on the interface for
// which match is true, waiting at most timeout.
func (s *Socket) Recv(timeout time.Duration, match func([]byte) bool) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 65536)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, ErrTimeout
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, err
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if match == nil || match(buf[:n]) {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// SendBatch transmits frames with one sendmmsg call per up to 64 of them,
// so that the receiving side sees bursts, as a NIC delivers them.
func (s *Socket) SendBatch(frames [][]byte) error {
	sa := unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Ifindex: int32(s.ifindex), Halen: 6}
	for len(frames) > 0 {
		n := min(len(frames), 64)
		msgs := make([]mmsghdr, n)
		iovs := make([]unix.Iovec, n)
		for i := 0; i < n; i++ {
			iovs[i].Base = &frames[i][0]
			iovs[i].SetLen(len(frames[i]))
			msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&sa))
			msgs[i].hdr.Namelen = uint32(unsafe.Sizeof(sa))
			msgs[i].hdr.Iov = &iovs[i]
			msgs[i].hdr.SetIovlen(1)
		}
		sent, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(n), 0, 0, 0)
		runtime.KeepAlive(frames)
		if errno != 0 {
			if errno == unix.EINTR || errno == unix.ENOBUFS || errno == unix.EAGAIN {
				continue
			}
			return fmt.Errorf("sendmmsg: %w", errno)
		}
		frames = frames[sent:]
	}
	return nil
}

// DeleteLink removes an interface (and its veth peer) from the current
// namespace.
func DeleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkDel(l)
}

// DisableOffloads turns off transmit checksum offload and segmentation
// offloads on an interface: frames that an XDP program will rewrite on the
// way must carry finished checksums (ethtool -K IFACE tx off tso off gso off).
func DisableOffloads(iface string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, cmd := range []uint32{0x17 /* ETHTOOL_STXCSUM */, 0x1f /* ETHTOOL_STSO */, 0x24 /* ETHTOOL_SGSO */} {
		v := struct{ cmd, data uint32 }{cmd, 0}
		var ifr [40]byte
		copy(ifr[:16], iface)
		*(*uintptr)(unsafe.Pointer(&ifr[16])) = uintptr(unsafe.Pointer(&v))
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr[0])))
		// Checksum offload must go; the segmentation offloads depend on
		// it, and some drivers refuse to set them separately.
		if errno != 0 && cmd == 0x17 {
			return fmt.Errorf("ethtool: turning off tx checksum offload on %s: %w", iface, errno)
		}
		runtime.KeepAlive(&v)
	}
	return nil
}
