package main

import (
	"fmt"
	"time"

	"github.com/director/director/internal/doctor"
	"github.com/director/director/loader"
)

var attachCmd = &command{
	uses: usesBPFFS,
	name: "attach", args: "IFACE [--mode native|generic]",
	summary: "Attach the loaded program to an interface.",
	help: "Attach the loaded program to an interface through a pinned bpf_link, which outlives this\n" +
		"process. Attaching again in the same mode changes nothing; in the other mode it switches modes\n" +
		"(the kernel holds one at a time: the interface runs no program for the moment between, which it\n" +
		"reports). A stale attachment whose interface is gone is replaced. An interface another XDP program\n" +
		"holds is refused, naming that program. Native mode on a veth whose peer runs no XDP program is\n" +
		"warned of: the frames the program sends back out are dropped there. So is native mode on a\n" +
		"virtio-net NIC with too few queues for XDP_TX to have its own (one per CPU beyond the stack's):\n" +
		"it then shares the stack's under a lock, slower, or the kernel refuses it, and the error says so.",
	run: runAttach,
}

func runAttach(e *env, c *command, args []string) error {
	fs := e.flags(c)
	mode := fs.String("mode", loader.ModeNative, "XDP `MODE`: native (driver) or generic (skb)")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := loader.CheckNoRun(e.bpffs, "attach"); err != nil {
		return err
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	at, err := d.Attach(pos[0], *mode)
	if err != nil {
		return err
	}
	if at.Switched != "" {
		fmt.Fprintf(e.stdout, "switched %s from %s to %s mode (link %d, program %d): it ran no program for %v while the link was replaced\n",
			at.Interface, at.Switched, at.Mode, at.LinkID, at.ProgramID, at.Gap.Round(time.Microsecond))
	} else {
		fmt.Fprintf(e.stdout, "attached to %s in %s mode (link %d, program %d)\n", at.Interface, at.Mode, at.LinkID, at.ProgramID)
	}
	for _, w := range at.Warnings {
		fmt.Fprintf(e.stderr, "director: warning: %s\n", w)
	}
	if w := vethWarning(at.Interface, at.Mode, "the encapsulated frames the program sends back out", "director stats --watch"); w != "" {
		fmt.Fprintf(e.stderr, "director: warning: %s\n", w)
	}
	return nil
}

// vethWarning is doctor's veth-peer finding for iface, as a warning: what
// is sent back out (what) would be dropped; watch is where to see it.
func vethWarning(iface, mode, what, watch string) string {
	f, err := doctor.VethPeer(iface, mode, what)
	if err != nil || f == nil {
		return ""
	}
	return fmt.Sprintf("%s ('%s' shows the drops); fix: %s", f.What, watch, f.Fix)
}
