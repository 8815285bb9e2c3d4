package gue

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"unsafe"

	"github.com/director/director/bpf/abi"
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
	// The layout is gue.h's: 36 bytes before the hops, 7 listed at most.
	if Size(MaxHops) != int(unsafe.Sizeof(abi.GLBEncap{})) || Size(1) != 36 || MaxHops != 8 || Port != 19523 {
		t.Errorf("Size(%d) = %d, Size(1) = %d, MaxHops %d, Port %d", MaxHops, Size(MaxHops), Size(1), MaxHops, Port)
	}
	if _, _, err := Parse(make([]byte, 60)); !errors.Is(err, ErrNotGUE) {
		t.Errorf("zeros parsed as GUE: %v", err)
	}
}

// TestRoundTripIPv6: the IPv6 underlay's encapsulation reads back, is
// Size6 long, carries its own private data type, and is laid out as
// docs/wire.md says: 56 bytes before the hops, 16 a hop, hlen 1 + 4 per
// hop listed. A GLB reader of the IPv4 hop list refuses it.
func TestRoundTripIPv6(t *testing.T) {
	a := netip.MustParseAddr
	for _, hops := range [][]netip.Addr{
		{a("fd00:10::1"), a("fd00:10::2")},
		{a("fd00:10::1"), a("fd00:10::2"), a("fd00:10::3"), a("fd00:10::4")},
	} {
		h := Header{Src: a("2001:db8::1"), Hops: hops, SourcePort: 0x8123, Proto: ProtoIPv4, FlowLabel: 0xabcde}
		inner := []byte("an inner packet")
		p := append(h.Append(nil, len(inner)), inner...)
		if len(p) != Size6(len(hops))+len(inner) || h.SizeOf() != Size6(len(hops)) {
			t.Fatalf("%d hops: %d bytes, Size6 says %d", len(hops), len(p), Size6(len(hops))+len(inner))
		}
		if p[0]>>4 != 6 || p[6] != 17 || p[7] != 64 || int(p[4])<<8|int(p[5]) != len(p)-40 {
			t.Errorf("%d hops: outer IPv6 header % x", len(hops), p[:8])
		}
		if p[48] != byte(1+4*(len(hops)-1)) || p[52] != 0x64 || p[53] != 0x01 || p[55] != byte(len(hops)-1) {
			t.Errorf("%d hops: GUE header % x", len(hops), p[48:56])
		}
		got, off, err := Parse(p)
		if err != nil || !reflect.DeepEqual(got, h) || string(p[off:]) != string(inner) {
			t.Fatalf("%d hops: parsed %+v at %d (%v), want %+v", len(hops), got, off, err, h)
		}
	}
	if Size6(MaxHops) != int(unsafe.Sizeof(abi.Gue6Encap{})) || Size6(1) != 56 {
		t.Errorf("Size6(%d) = %d, Size6(1) = %d", MaxHops, Size6(MaxHops), Size6(1))
	}
	// GLB's private data type is 0: a reader of it takes this for nothing.
	if PrivateTypeV6 == PrivateTypeGLB {
		t.Error("the IPv6 hop list shares GLB's private data type")
	}
}
