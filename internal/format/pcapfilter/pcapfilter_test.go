//go:build !nolibpcap

package pcapfilter

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
)

// TestCompileAndMatch: libpcap's programs for tcpdump expressions match
// the frames tcpdump would, GUE packets with their hop lists among them,
// and a bad expression is refused with libpcap's own words.
func TestCompileAndMatch(t *testing.T) {
	a := netip.MustParseAddr
	syn := pkt.IPv4(a("203.0.113.7"), a("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x02, nil), pkt.V4Opts{})
	h := gue.Header{Src: a("192.0.2.1"), Hops: []netip.Addr{a("10.0.0.5"), a("10.0.0.6")}, SourcePort: 0x8123, Proto: gue.ProtoIPv4}
	encap := pkt.Eth(pkt.GatewayMAC, pkt.DirectorMAC, 0, 0x0800, append(h.Append(nil, len(syn)), syn...))
	v6 := pkt.Frame(pkt.IPv6(a("2001:db8::7"), a("fd00:20::1"), 17, pkt.UDP(5353, 53, []byte("q"))))
	vlan := pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 42, 0x0800, syn)
	frames := map[string][]byte{"syn": pkt.Frame(syn), "encap": encap, "v6": v6, "vlan": vlan}
	for _, c := range []struct {
		expr  string
		match string // the frames it matches, in order
	}{
		{"tcp port 80", "syn"},
		{"udp dst port 19523", "encap"},
		{"dst host 10.0.0.5", "encap"},
		{"host 203.0.113.7", "syn"},
		{"ip6 and udp port 53", "v6"},
		{"vlan 42", "vlan"},
		{"not ip6", "encap syn vlan"},
	} {
		f, err := Compile(c.expr, 65535)
		if errors.Is(err, ErrNoLibpcap) {
			testenv.Libpcap(t, err)
		}
		if err != nil {
			t.Fatalf("%q: %v", c.expr, err)
		}
		var got []string
		for _, name := range []string{"encap", "syn", "v6", "vlan"} {
			if f.Match(frames[name]) {
				got = append(got, name)
			}
		}
		if strings.Join(got, " ") != c.match {
			t.Errorf("%q matches %v, want %s (program %v)", c.expr, got, c.match, f.Program)
		}
	}
	if _, err := Compile("tcp port", 65535); err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Errorf("a bad expression: %v", err)
	}
}
