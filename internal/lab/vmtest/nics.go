package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Each guest has real NICs besides the veths its tests make: virtio-net
// devices, whose driver runs XDP natively, on one Ethernet segment. On the
// host each is a multi-queue tap in a network namespace of the guest's
// own, the taps joined by a bridge there (so nothing of the host's own
// network is touched), and qemu runs in that namespace. The guest's
// tests get the NICs' names in DIRECTOR_TEST_NICS (testenv.NICs).
//
// Queues: virtio_net gives XDP_TX queues of its own when the NIC has a
// queue pair per CPU beyond those in use (it uses one per CPU, up to what
// the NIC has); with fewer, Linux before 5.13 refuses native XDP and later
// ones share the stack's queues under a lock. The segment's NICs have
// enough (segmentQueues for the guests' CPUs); one more NIC on it has a
// single queue pair: the case of fewer queues than CPUs (TestNICQueues).

// segmentNICs are the NICs on the shared segment: the testbed's router,
// client, director and backends (internal/lab/testbed's Options.NICs).
const segmentNICs = 6

// segmentQueues is the queue pairs each segment NIC gets for a guest of
// cpus CPUs: twice the CPUs, enough for the stack's and XDP_TX's.
func segmentQueues(cpus int) int { return 2 * cpus }

// guestNet is a guest's network namespace on the host.
type guestNet struct {
	name string // under /run/netns
	taps []tap
}

type tap struct {
	name   string
	queues int
	bridge bool // on the segment
}

// newGuestNet makes the namespace, its bridge and the taps.
func newGuestNet(kernel string, cpus int) (*guestNet, error) {
	clearStaleNets()
	g := &guestNet{name: fmt.Sprintf("director-vmtest-%d-%s", os.Getpid(), strings.ReplaceAll(kernel, ".", "_"))}
	for i := 0; i < segmentNICs; i++ {
		g.taps = append(g.taps, tap{name: fmt.Sprintf("vt%d", i), queues: segmentQueues(cpus), bridge: true})
	}
	g.taps = append(g.taps, tap{name: "vtq1", queues: 1, bridge: true})
	steps := [][]string{
		{"netns", "add", g.name},
		{"-n", g.name, "link", "add", "br0", "type", "bridge"},
		{"-n", g.name, "link", "set", "br0", "up"},
	}
	for _, t := range g.taps {
		add := []string{"-n", g.name, "tuntap", "add", "mode", "tap", "name", t.name}
		if t.queues > 1 {
			add = append(add, "multi_queue") // qemu opens one of each, and a single-queue tap must not have it
		}
		steps = append(steps, add)
		if t.bridge {
			steps = append(steps, []string{"-n", g.name, "link", "set", t.name, "master", "br0"})
		}
		steps = append(steps, []string{"-n", g.name, "link", "set", t.name, "up"})
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			g.close()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return g, nil
}

// close removes the namespace, and the bridge and taps with it.
func (g *guestNet) close() {
	exec.Command("ip", "netns", "del", g.name).Run()
}

// clearStaleNets removes the namespaces of vmtest runs that are gone.
func clearStaleNets() {
	ents, _ := filepath.Glob("/run/netns/director-vmtest-*")
	for _, e := range ents {
		f := strings.Split(strings.TrimPrefix(filepath.Base(e), "director-vmtest-"), "-")
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			exec.Command("ip", "netns", "del", filepath.Base(e)).Run()
		}
	}
}

// qemuArgs are the NICs' qemu options: each tap as a virtio-net device
// with its queues (vectors for each queue pair's two, config and control),
// no option ROM (nothing boots from them).
func (g *guestNet) qemuArgs() []string {
	var args []string
	for i, t := range g.taps {
		args = append(args,
			"-netdev", fmt.Sprintf("tap,id=n%d,ifname=%s,script=no,downscript=no,vhost=off,queues=%d", i, t.name, t.queues),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=n%d,mac=52:54:00:12:00:%02x,mq=%s,vectors=%d,romfile=",
				i, i+1, onOff(t.queues > 1), 2*t.queues+2))
	}
	return args
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// nicEnv is what the guest's tests are told of the NICs, as the guest
// names them in the order qemu has them: the segment's (eth0...), then
// the single-queue one.
func nicEnv() string {
	var seg []string
	for i := 0; i < segmentNICs; i++ {
		seg = append(seg, fmt.Sprintf("eth%d", i))
	}
	return fmt.Sprintf("DIRECTOR_TEST_NICS='%s' DIRECTOR_TEST_NIC_SINGLE_QUEUE=eth%d DIRECTOR_NIC_TESTS=required",
		strings.Join(seg, " "), segmentNICs)
}

// command runs qemu inside the namespace.
func (g *guestNet) command(qemu string, args []string) (string, []string) {
	return "ip", append([]string{"netns", "exec", g.name, qemu}, args...)
}
