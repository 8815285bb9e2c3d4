package main

import (
	"fmt"

	"github.com/director/director/loader"
)

func init() {
	a := &command{
		name: "attach", args: "IFACE [--mode native|generic]",
		summary: "Attach the loaded program to an interface through a pinned bpf_link, which outlives this\n" +
			"process. Attaching again in the same mode changes nothing.",
	}
	a.run = func(e *env, args []string) error {
		fs := e.flags(a)
		e.globalFlags(fs)
		mode := fs.String("mode", loader.ModeNative, "XDP mode: native (driver) or generic (skb)")
		pos, err := parse(fs, args, 1, 1)
		if err != nil {
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
		fmt.Fprintf(e.stdout, "attached to %s in %s mode (link %d, program %d)\n", at.Interface, at.Mode, at.LinkID, at.ProgramID)
		return nil
	}
	register(a)

	dt := &command{
		name: "detach", args: "IFACE",
		summary: "Detach the program from an interface. Detaching an interface that is not attached is not an error.",
	}
	dt.run = func(e *env, args []string) error {
		fs := e.flags(dt)
		e.globalFlags(fs)
		pos, err := parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		d, err := e.open()
		if err != nil {
			return err
		}
		defer d.Close()
		if err := d.Detach(pos[0]); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "detached from %s\n", pos[0])
		return nil
	}
	register(dt)

	u := &command{
		name: "unload", args: "[--bpffs DIR]",
		summary: "Detach every interface and remove every pin: the director stops. Idempotent.",
	}
	u.run = func(e *env, args []string) error {
		fs := e.flags(u)
		e.globalFlags(fs)
		if _, err := parse(fs, args, 0, 0); err != nil {
			return err
		}
		if err := loader.Unload(e.bpffs); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "unloaded %s\n", e.bpffs)
		return nil
	}
	register(u)
}
