package loader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/director/director/internal/testenv"
	"github.com/director/director/internal/testnet"
)

// TestAttachmentStates: an attachment seen from another network namespace
// keeps the name it was attached by (never another interface's of the same
// index), and once its namespace is deleted it shows as gone, until detach
// removes it; attaching that name again replaces the stale pin.
func TestAttachmentStates(t *testing.T) {
	testenv.Kernel(t)
	d := loadTest(t)
	ready, done, exited := make(chan error), make(chan struct{}), make(chan error, 1)
	go func() {
		exited <- testnet.InNetns(func() error {
			err := testnet.Veth("far0", "far1")
			if err == nil {
				_, err = d.Attach("far0", ModeGeneric)
			}
			if err == nil {
				var atts []Attachment
				atts, err = d.Attachments()
				if err == nil && (len(atts) != 1 || atts[0].State != StateAttached || atts[0].Mode != ModeGeneric) {
					err = fmt.Errorf("inside its namespace: %+v", atts)
				}
			}
			ready <- err
			<-done
			return nil
		})
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	atts, err := d.Attachments()
	if err != nil || len(atts) != 1 || atts[0].Interface != "far0" || atts[0].State != StateOtherNamespace || atts[0].Ifindex == 0 {
		t.Fatalf("from another namespace: %+v %v", atts, err)
	}
	close(done)
	if err := <-exited; err != nil {
		t.Fatal(err)
	}
	// The namespace, and the veth with it, goes away in the background.
	deadline := time.Now().Add(10 * time.Second)
	for {
		atts, err = d.Attachments()
		if err == nil && len(atts) == 1 && atts[0].State == StateGone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after its namespace was deleted: %+v %v", atts, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Loading again (an upgrade walks every link) is not stopped by it.
	if d2, err := Load(d.Dir); err != nil {
		t.Fatalf("load with a gone attachment: %v", err)
	} else {
		d2.Close()
	}
	if err := d.Detach("far0"); err != nil {
		t.Fatal(err)
	}
	if atts, err := d.Attachments(); err != nil || len(atts) != 0 {
		t.Fatalf("after detach: %+v %v", atts, err)
	}
}

// TestAttachNamesTheHolder: an interface another XDP program holds is
// refused with that program's name.
func TestAttachNamesTheHolder(t *testing.T) {
	testenv.Kernel(t)
	d := loadTest(t)
	err := testnet.InNetns(func() error {
		if err := testnet.Veth("busy0", "busy1"); err != nil {
			return err
		}
		other, err := PassAll()
		if err != nil {
			return err
		}
		defer other.Close()
		nl, err := netlink.LinkByName("busy0")
		if err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: other, Interface: nl.Attrs().Index, Flags: link.XDPGenericMode})
		if err != nil {
			return err
		}
		defer l.Close()
		_, err = d.Attach("busy0", ModeGeneric)
		if err == nil || !strings.Contains(err.Error(), `"xdp_pass_all"`) || !strings.Contains(err.Error(), "already holds busy0's XDP hook") {
			return fmt.Errorf("attach to a taken interface: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
