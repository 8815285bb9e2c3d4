package bpf

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestCaptureAsMap checks that both programs' capture setting becomes the
// map "capture" with the layout older builds pinned (an array of one
// struct dir_capture, no flags), and that no instruction still names the
// section, which would leave the program a map nothing pins.
func TestCaptureAsMap(t *testing.T) {
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){"director": LoadDirector, "backend": LoadBackend} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := spec.Maps[captureSection]; !ok {
			t.Fatalf("%s: no %s section: the hook would read a map lookup again", name, captureSection)
		}
		if err := CaptureAsMap(spec); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ms := spec.Maps[CaptureMap]
		if ms == nil || ms.Name != CaptureMap || ms.Type != ebpf.Array || ms.KeySize != 4 ||
			ms.ValueSize != uint32(captureSize) || ms.MaxEntries != 1 || ms.Flags != 0 {
			t.Fatalf("%s: capture map %+v", name, ms)
		}
		if _, ok := spec.Maps[captureSection]; ok {
			t.Errorf("%s: the section is still a map of its own", name)
		}
		refs := 0
		for _, p := range spec.Programs {
			for _, ins := range p.Instructions {
				switch ins.Reference() {
				case captureSection:
					t.Errorf("%s: %s still refers to %s", name, p.Name, captureSection)
				case CaptureMap:
					refs++
				}
			}
		}
		if refs == 0 {
			t.Errorf("%s: no instruction reads the capture setting", name)
		}
		if err := CaptureAsMap(spec); err != nil { // an object without the section: left as it is
			t.Errorf("%s: a second CaptureAsMap: %v", name, err)
		}
	}
}
