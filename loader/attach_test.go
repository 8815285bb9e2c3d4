package loader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// TestAttachmentStates: an attachment seen from another network namespace
// keeps the name it was attached by (never another interface's of the same
// index), and once its interface is deleted (with its namespace, say) it
// shows as gone, until detach removes it.
func TestAttachmentStates(t *testing.T) {
	testenv.Kernel(t)
	d := loadTest(t)
	ready, done, exited := make(chan error), make(chan struct{}), make(chan error, 1)
	go func() {
		exited <- testrun.InNetns(func() error {
			err := testrun.Veth("far0", "far1")
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
			// The interface goes, as it does with its namespace (which
			// the kernel tears down in the background, in its own time).
			return testrun.DeleteLink("far0")
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
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("busy0", "busy1"); err != nil {
			return err
		}
		detach, err := testrun.AttachPassAll("busy0", link.XDPGenericMode)
		if err != nil {
			return err
		}
		defer detach()
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

// TestLinkMTUsFollowTheInterfaces: attaching records the interface's MTU
// for the single-buffer build's too-big check, a sync follows a change,
// and detaching removes it.
func TestLinkMTUsFollowTheInterfaces(t *testing.T) {
	testenv.Kernel(t)
	d := loadTest(t)
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("mtu0", "mtu1"); err != nil {
			return err
		}
		nl, err := netlink.LinkByName("mtu0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(nl, 1400); err != nil {
			return err
		}
		if _, err := d.Attach("mtu0", ModeGeneric); err != nil {
			return err
		}
		ifindex := uint32(nl.Attrs().Index)
		want := func(mtu uint32) error {
			got, err := d.LinkMTUs()
			if err != nil {
				return err
			}
			if mtu == 0 && len(got) != 0 || mtu != 0 && (len(got) != 1 || got[ifindex] != mtu) {
				return fmt.Errorf("link_mtus holds %v, want %d for ifindex %d", got, mtu, ifindex)
			}
			return nil
		}
		if err := want(1400); err != nil {
			return fmt.Errorf("attached: %w", err)
		}
		if err := netlink.LinkSetMTU(nl, 1280); err != nil {
			return err
		}
		if err := d.SyncLinkMTUs(); err != nil {
			return err
		}
		if err := want(1280); err != nil {
			return fmt.Errorf("after a change: %w", err)
		}
		if err := d.Detach("mtu0"); err != nil {
			return err
		}
		if err := want(0); err != nil {
			return fmt.Errorf("detached: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
