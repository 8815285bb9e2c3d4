package bgp

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/table"
)

// router is a second GoBGP speaker standing in for a router: it listens
// on 127.0.0.2 and accepts the director (127.0.0.1) as a passive peer.
type router struct {
	s    *server.BgpServer
	port int
}

func newRouter(t *testing.T) *router {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &router{s: server.NewBgpServer(server.LoggerOption(&logger{slog.New(slog.NewTextHandler(io.Discard, nil))})), port: port}
	go r.s.Serve()
	ctx := context.Background()
	if err := r.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 65000, RouterId: "127.0.0.2",
		ListenPort: int32(port), ListenAddresses: []string{"127.0.0.2"}}}); err != nil {
		t.Fatal(err)
	}
	err = r.s.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: "127.0.0.1", PeerAsn: 65001},
		Transport: &api.Transport{PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: 3, KeepaliveInterval: 1, IdleHoldTimeAfterReset: 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.s.StopBgp(context.Background(), &api.StopBgpRequest{}); r.s.Stop() })
	return r
}

// routes is what the router has learned: prefix -> next hop.
func (r *router) routes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := r.s.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL,
		Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}, func(d *api.Destination) {
		for _, p := range d.Paths {
			for _, a := range p.Pattrs {
				var nh api.NextHopAttribute
				if a.UnmarshalTo(&nh) == nil {
					out[d.Prefix] = nh.NextHop
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keys(m map[string]string) string {
	var k []string
	for p, nh := range m {
		k = append(k, p+" via "+nh)
	}
	sort.Strings(k)
	return strings.Join(k, ", ")
}

// TestSpeakerAnnouncesToARealPeer: a session to a BGP speaker on loopback;
// VIPs announced with the session's local address as next hop, a VIP
// withdrawn, the session's state and counts reported, and everything gone
// from the peer when the speaker stops.
func TestSpeakerAnnouncesToARealPeer(t *testing.T) {
	r := newRouter(t)
	changes := make(chan status.Peer, 16)
	cfg := &table.BGP{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.1"), HoldTime: 3 * time.Second, ConnectRetry: time.Second,
		Peers: []table.BGPPeer{{Address: netip.MustParseAddr("127.0.0.2"), ASN: 65000, Port: uint16(r.port)}}}
	sp, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func(p status.Peer) { changes <- p })
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			sp.Stop()
		}
	}()
	vips := []netip.Prefix{netip.MustParsePrefix("10.60.0.1/32"), netip.MustParsePrefix("10.61.0.7/24")}
	if err := sp.Announce(vips); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both routes at the peer", func() bool { return len(r.routes(t)) == 2 })
	if got := keys(r.routes(t)); got != "10.60.0.1/32 via 127.0.0.1, 10.61.0.0/24 via 127.0.0.1" {
		t.Fatalf("the peer learned %s", got)
	}
	peers := sp.Peers()
	if len(peers) != 1 || !peers[0].Established || peers[0].State != "established" || peers[0].Advertised != 2 ||
		peers[0].ASN != 65000 || peers[0].Since.IsZero() {
		t.Fatalf("peers: %+v", peers)
	}
	select {
	case p := <-changes:
		if p.Address != "127.0.0.2" {
			t.Errorf("change for %+v", p)
		}
	case <-time.After(time.Second):
		t.Error("no session change reported")
	}
	if err := sp.Announce(vips[:1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the withdrawal", func() bool { return len(r.routes(t)) == 1 })
	if got := sp.Announced(); len(got) != 1 || got[0] != vips[0] {
		t.Errorf("announced %v", got)
	}
	sp.Stop()
	stopped = true
	waitFor(t, "the routes to go with the session", func() bool { return len(r.routes(t)) == 0 })
}

// TestSpeakerWithAPasswordTheRouterLacks: a TCP MD5 password on one side
// only keeps the session from coming up: nothing is announced.
func TestSpeakerWithAPasswordTheRouterLacks(t *testing.T) {
	r := newRouter(t)
	cfg := &table.BGP{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.1"), HoldTime: 3 * time.Second, ConnectRetry: time.Second,
		Peers: []table.BGPPeer{{Address: netip.MustParseAddr("127.0.0.2"), ASN: 65000, Port: uint16(r.port), Password: "x"}}}
	sp, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Stop()
	sp.Announce([]netip.Prefix{netip.MustParsePrefix("10.60.0.1/32")})
	time.Sleep(2 * time.Second)
	if p := sp.Peers(); len(p) != 1 || p[0].Established || len(r.routes(t)) != 0 {
		t.Fatalf("a session came up without the router's password: %+v", p)
	}
}
