package gue

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"unsafe"

	"github.com/director/director/bpf"
)

// TestRoundTrip: what Append writes, Parse reads back, for two hops and
// four, and Size is what Append wrote.
func TestRoundTrip(t *testing.T) {
	a := netip.MustParseAddr
	for _, hops := range [][]netip.Addr{
		{a("192.168.0.1"), a("192.168.0.2")},
		{a("192.168.0.1"), a("192.168.0.2"), a("192.168.0.3"), a("192.168.0.4")},
	} {
		h := Header{Src: a("192.0.2.1"), Hops: hops, SourcePort: 0x8123, NextHop: 0, Proto: ProtoIPv6}
		inner := []byte("an inner packet")
		p := append(h.Append(nil, len(inner)), inner...)
		if len(p) != Size(len(hops))+len(inner) {
			t.Fatalf("%d hops: %d bytes, Size says %d", len(hops), len(p), Size(len(hops))+len(inner))
		}
		if Checksum(p[:20]) != 0 {
			t.Errorf("%d hops: outer IPv4 checksum", len(hops))
		}
		got, off, err := Parse(p)
		if err != nil || !reflect.DeepEqual(got, h) || string(p[off:]) != string(inner) {
			t.Fatalf("%d hops: parsed %+v at %d (%v), want %+v", len(hops), got, off, err, h)
		}
	}
	// The layout is gue.h's: 36 bytes before the hops, 3 hops at most.
	if Size(MaxHops) != int(unsafe.Sizeof(bpf.GLBEncap{})) || Size(1) != 36 || MaxHops != 4 || Port != 19523 {
		t.Errorf("Size(%d) = %d, Size(1) = %d, MaxHops %d, Port %d", MaxHops, Size(MaxHops), Size(1), MaxHops, Port)
	}
	if _, _, err := Parse(make([]byte, 60)); !errors.Is(err, ErrNotGUE) {
		t.Errorf("zeros parsed as GUE: %v", err)
	}
}
