package bpf

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf/abi"
)

// CaptureMap is the map userspace knows capture.h's setting (struct
// dir_capture) by, in both programs: its pin's name, and its map's.
const CaptureMap = "capture"

// captureSize is struct dir_capture's size, the setting's section's.
const captureSize = unsafe.Sizeof(abi.Capture{})

// captureSection is the data section the setting lives in, so that the
// datapath reads it with one load (capture.h says why).
const captureSection = ".data.capture"

// CaptureAsMap makes the capture setting's data section of spec the map
// "capture": the name it is pinned and found by (bpffs forbids dots), with
// no flags, so that it is the array of one struct dir_capture that pins
// made by an older build hold (the section's layout is that map's), and
// the programs' references renamed to match. An object from before the
// section (which has the map itself) is left as it is.
func CaptureAsMap(spec *ebpf.CollectionSpec) error {
	ms, ok := spec.Maps[captureSection]
	if !ok {
		return nil
	}
	if _, clash := spec.Maps[CaptureMap]; clash {
		return errors.New("bpf: the object has both the capture section and a capture map")
	}
	if ms.Type != ebpf.Array || ms.MaxEntries != 1 || ms.ValueSize != uint32(captureSize) {
		return fmt.Errorf("bpf: capture section: %v of %d entries of %d bytes, want one struct dir_capture (%d bytes)",
			ms.Type, ms.MaxEntries, ms.ValueSize, captureSize)
	}
	ms = ms.Copy()
	ms.Name = CaptureMap
	ms.Flags = 0 // not mmapable: as the map it replaced
	delete(spec.Maps, captureSection)
	spec.Maps[CaptureMap] = ms
	for _, p := range spec.Programs {
		for i := range p.Instructions {
			if p.Instructions[i].Reference() == captureSection {
				p.Instructions[i] = p.Instructions[i].WithReference(CaptureMap)
			}
		}
	}
	for name, v := range spec.Variables {
		if v.SectionName == captureSection {
			delete(spec.Variables, name) // its map is not mmapable: read and written as the map
		}
	}
	return nil
}

// DirectorPinned are the director's maps: bpf2go's, and the capture
// setting's section as the map "capture" (CaptureAsMap).
type DirectorPinned struct {
	DirectorMaps
	Capture *ebpf.Map `ebpf:"capture"`
}

// Close closes every map.
func (m *DirectorPinned) Close() error { return errors.Join(m.DirectorMaps.Close(), m.Capture.Close()) }

// BackendPinned are the backend program's maps, as DirectorPinned.
type BackendPinned struct {
	BackendMaps
	Capture *ebpf.Map `ebpf:"capture"`
}

// Close closes every map.
func (m *BackendPinned) Close() error { return errors.Join(m.BackendMaps.Close(), m.Capture.Close()) }
