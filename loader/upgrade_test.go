package loader

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/director/director/internal/pkt"
	"github.com/director/director/internal/testnet"
)

// TestLoadReplacesAnOlderProgram pins another program in the director's
// place and attaches it, as an older version would be, then loads: the new
// program must take over the attached interface through the same link (no
// moment without a program), and frames must be steered again.
func TestLoadReplacesAnOlderProgram(t *testing.T) {
	dir := testDir(t)
	err := testnet.InNetns(func() error {
		if err := testnet.Veth("up0", "up1"); err != nil {
			return err
		}
		d, err := Load(dir)
		if err != nil {
			return err
		}
		dc := directorConfig()
		if _, err := d.ApplyChange(Change{Tables: testTables(nil, testConfig), Config: &dc}, nil); err != nil {
			return err
		}
		// The "old version": a program that passes everything, pinned and
		// attached where the director's would be.
		old, err := PassAll()
		if err != nil {
			return err
		}
		defer old.Close()
		d.Close()
		if err := os.Remove(filepath.Join(dir, pinProgram)); err != nil {
			return err
		}
		if err := old.Pin(filepath.Join(dir, pinProgram)); err != nil {
			return err
		}
		a, err := attachPinned(dir, old, "up0", ModeGeneric)
		if err != nil {
			return err
		}
		oldInfo, _ := old.Info()
		oldID, _ := oldInfo.ID()
		if a.ProgramID != uint32(oldID) {
			return fmt.Errorf("attached program %d, want the old %d", a.ProgramID, oldID)
		}
		sock, err := testnet.Listen("up1")
		if err != nil {
			return err
		}
		defer sock.Close()
		g := &gen{rngFor(3)}
		sock.Send(pkt.Frame(g.steeredIP()))
		if _, err := sock.Recv(300*time.Millisecond, isGUE); err == nil {
			return fmt.Errorf("the old program steered a frame")
		}

		// The new version is loaded.
		d, err = Load(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		atts, err := d.Attachments()
		if err != nil || len(atts) != 1 {
			return fmt.Errorf("attachments %v, %v", atts, err)
		}
		newInfo, _ := d.Prog.Info()
		newID, _ := newInfo.ID()
		if atts[0].LinkID != a.LinkID || atts[0].ProgramID != uint32(newID) {
			return fmt.Errorf("after load: link %d program %d; want link %d program %d", atts[0].LinkID, atts[0].ProgramID, a.LinkID, newID)
		}
		if err := sock.Send(pkt.Frame(g.steeredIP())); err != nil {
			return err
		}
		if _, err := sock.Recv(2*time.Second, isGUE); err != nil {
			return fmt.Errorf("the new program does not steer: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
