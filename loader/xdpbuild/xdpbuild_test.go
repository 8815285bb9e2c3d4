package xdpbuild

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestBuildsDiffer: the two objects are the builds build.h says, with the
// same maps but the single-buffer build's scratch.
func TestBuildsDiffer(t *testing.T) {
	multi, err := DirectorOf(MultiBuffer)
	if err != nil {
		t.Fatal(err)
	}
	single, err := DirectorOf(SingleBuffer)
	if err != nil {
		t.Fatal(err)
	}
	if p := multi.Programs["director"]; p == nil || p.SectionName != "xdp.frags" || p.Flags&unix.BPF_F_XDP_HAS_FRAGS == 0 {
		t.Errorf("multi-buffer build's program: %+v", p)
	}
	if p := single.Programs["director"]; p == nil || p.SectionName != "xdp" || p.Flags&unix.BPF_F_XDP_HAS_FRAGS != 0 {
		t.Errorf("single-buffer build's program: %+v", p)
	}
	for name := range multi.Maps {
		if _, ok := single.Maps[name]; !ok {
			t.Errorf("the single-buffer build lacks map %s", name)
		}
	}
	for name := range single.Maps {
		if _, ok := multi.Maps[name]; !ok && name != "flow_scratch" {
			t.Errorf("the single-buffer build has map %s of its own", name)
		}
	}
	if _, ok := single.Maps["flow_scratch"]; !ok {
		t.Error("the single-buffer build has no flow_scratch")
	}
	if _, ok := multi.Maps["link_mtus"]; !ok {
		t.Error("no link_mtus")
	}
	if Fallbacks(MultiBuffer) != nil || len(Fallbacks(SingleBuffer)) != 2 {
		t.Error("fallbacks")
	}
}
