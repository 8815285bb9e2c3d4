package testbed

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/table/quiclb"
)

// TestQUICPacketTooBigReachesItsServer: a QUIC connection moves to a
// client port whose row's primary is another backend than its server.
// A router's fragmentation-needed about a packet the server sent on it (a
// Handshake packet, whose source connection ID the server chose) reaches
// that server's host, where the kernel counts it; one quoting a short
// header to the client's own ID (which names no server) follows the row,
// to another backend. The director counts one ICMP error routed by ID.
func TestQUICPacketTooBigReachesItsServer(t *testing.T) {
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeQUIC(i); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, tb, QUICConfig(nil, nil, 3, true))
	s, err := tb.OpenQUIC(1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := tb.Migrate(s); err != nil {
		t.Fatal(err)
	}
	server := BackendIndex(s.Backend)
	port := s.quic.port()
	key := [16]byte(QUICSettings.Key)
	gen, err := quiclb.NewConnectionIDGenerator(quiclb.Config{ConfigID: QUICSettings.ConfigID,
		ServerID: []byte(QUICServerID(server)), NonceLen: int(QUICSettings.NonceLen), Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	scid, err := gen.GenerateConnectionID()
	if err != nil {
		t.Fatal(err)
	}
	clientID := make([]byte, 8)
	rand.Read(clientID)
	clientID[0] = 0 // config rotation 0: not the table's
	handshake := append([]byte{0xe0, 0, 0, 0, 1, byte(len(clientID))}, clientID...)
	handshake = append(append(append(handshake, byte(scid.Len())), scid.Bytes()...), make([]byte, 1200)...)
	short := append(append([]byte{0x40}, clientID...), make([]byte, 1200)...)

	routedBefore := icmpRouted(t, tb)
	before := destUnreachs(t, tb)
	sendTooBig(t, tb, port, handshake)
	after := waitDestUnreachs(t, tb, before, 1)
	for i := range after {
		want := uint64(0)
		if i+1 == server {
			want = 1
		}
		if got := after[i] - before[i]; got != want {
			t.Errorf("backend%d's kernel counted %d destination-unreachable messages; the quoted packet's server is backend%d", i+1, got, server)
		}
	}
	if got := icmpRouted(t, tb) - routedBefore; got != 1 {
		t.Errorf("the director counted %d ICMP errors routed by connection ID, want 1", got)
	}

	// The control: the same 4-tuple, quoting an ID that names no server.
	before = destUnreachs(t, tb)
	sendTooBig(t, tb, port, short)
	after = waitDestUnreachs(t, tb, before, 1)
	var total uint64
	for i := range after {
		total += after[i] - before[i]
	}
	if total != 1 || after[server-1] != before[server-1] {
		t.Errorf("the ICMP error quoting the client's ID: %d arrived, backend%d's among them: %v; the row's primary is another backend",
			total, server, after[server-1] != before[server-1])
	}
}

// sendTooBig sends, from the client's host acting as a router, an ICMP
// fragmentation-needed to the VIP quoting a UDP packet from VIP:QUICPort
// to the client's port carrying payload, cut to the 576 bytes a router
// sends at most.
func sendTooBig(t *testing.T, tb *Testbed, port uint16, payload []byte) {
	t.Helper()
	quoted := pkt.IPv4(VIP, ClientIP, 17, pkt.UDP(QUICPort, port, payload), pkt.V4Opts{FragOff: 0x4000})
	quoted = quoted[:576-20-8]
	msg := pkt.ICMP(3, 4, 1400, quoted)
	err := tb.Client.Do(func() error {
		c, err := net.ListenPacket("ip4:icmp", ClientIP.String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo(msg, &net.IPAddr{IP: VIP.AsSlice()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// destUnreachs is each backend's kernel's count of ICMP destination
// unreachable messages received (/proc/net/snmp, Icmp InDestUnreachs).
func destUnreachs(t *testing.T, tb *Testbed) []uint64 {
	t.Helper()
	out := make([]uint64, len(tb.Backends))
	for i, h := range tb.Backends {
		err := h.Do(func() error {
			// The thread's namespace: /proc/self is the process's.
			b, err := os.ReadFile("/proc/thread-self/net/snmp")
			if err != nil {
				return err
			}
			v, err := snmpField(string(b), "Icmp:", "InDestUnreachs")
			out[i] = v
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// waitDestUnreachs waits until the backends have counted n more than
// before between them, and a little longer for any that should not come.
func waitDestUnreachs(t *testing.T, tb *Testbed, before []uint64, n uint64) []uint64 {
	t.Helper()
	var after []uint64
	for range 50 {
		after = destUnreachs(t, tb)
		var d uint64
		for i := range after {
			d += after[i] - before[i]
		}
		if d >= n {
			break
		}
		time.Sleep(testenv.Scaled(100 * time.Millisecond))
	}
	time.Sleep(testenv.Scaled(300 * time.Millisecond))
	return destUnreachs(t, tb)
}

func icmpRouted(t *testing.T, tb *Testbed) uint64 {
	t.Helper()
	return globalCounters(t, tb)[model.QUICICMPRouted]
}

// globalCounters are the testbed director's global counters, summed over
// CPUs.
func globalCounters(t *testing.T, tb *Testbed) []uint64 {
	t.Helper()
	d, err := tb.OpenDirector()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	g, err := d.GlobalCounters()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// snmpField reads a field of /proc/net/snmp: a header line and a value
// line, both starting with section.
func snmpField(snmp, section, field string) (uint64, error) {
	var lines [][]string
	for _, l := range strings.Split(snmp, "\n") {
		if strings.HasPrefix(l, section) {
			lines = append(lines, strings.Fields(l))
		}
	}
	if len(lines) != 2 || len(lines[0]) != len(lines[1]) {
		return 0, fmt.Errorf("no %s section in /proc/net/snmp", section)
	}
	for i, name := range lines[0] {
		if name == field {
			return strconv.ParseUint(lines[1][i], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s %s in /proc/net/snmp", section, field)
}
