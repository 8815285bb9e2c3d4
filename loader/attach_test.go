package loader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/director/director/internal/testenv"
	"github.com/director/director/loader/lab"
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
		exited <- lab.InNetns(func() error {
			err := lab.Veth("far0", "far1")
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
			return lab.DeleteLink("far0")
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
	err := lab.InNetns(func() error {
		if err := lab.Veth("busy0", "busy1"); err != nil {
			return err
		}
		detach, err := lab.AttachPassAll("busy0", link.XDPGenericMode)
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
