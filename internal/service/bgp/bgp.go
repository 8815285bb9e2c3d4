// Package bgp announces a director's VIPs to the routers in front of a
// fleet, with GoBGP embedded as a library: a session to each router, each
// VIP a route whose next hop is the session's local address. Routers that
// hear the same VIP from every director spread flows over them with ECMP;
// a director that withdraws, or whose session ends, is taken out.
package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/table"
)

// Speaker is a running BGP speaker.
type Speaker struct {
	cfg table.BGP
	s   *server.BgpServer
	log *slog.Logger

	mu        sync.Mutex
	announced map[netip.Prefix][]byte // the path's UUID
	stopWatch context.CancelFunc
}

// Start starts a speaker with cfg's sessions, announcing nothing yet;
// onChange, when not nil, is called (on GoBGP's goroutine) when a
// session's state changes.
func Start(cfg *table.BGP, log *slog.Logger, onChange func(status.Peer)) (*Speaker, error) {
	sp := &Speaker{cfg: *cfg, log: log, announced: map[netip.Prefix][]byte{}}
	sp.s = server.NewBgpServer(server.LoggerOption(&logger{log}))
	go sp.s.Serve()
	ctx := context.Background()
	err := sp.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: cfg.ASN, RouterId: cfg.RouterID.String(),
		ListenPort: -1, // a director connects to its routers; it does not listen
	}})
	if err != nil {
		sp.s.Stop()
		return nil, fmt.Errorf("bgp: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	sp.stopWatch = cancel
	err = sp.s.WatchEvent(wctx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, func(r *api.WatchEventResponse) {
		if p := r.GetPeer(); p != nil && p.Type == api.WatchEventResponse_PeerEvent_STATE && p.Peer != nil {
			st := peerState(p.Peer)
			log.Info("bgp session "+st.State, "peer", st.Address, "asn", st.ASN)
			if onChange != nil {
				onChange(st)
			}
		}
	})
	if err != nil {
		sp.Stop()
		return nil, fmt.Errorf("bgp: watching sessions: %w", err)
	}
	for i, p := range cfg.Peers {
		if err := sp.s.AddPeer(ctx, &api.AddPeerRequest{Peer: sp.peer(p)}); err != nil {
			sp.Stop()
			return nil, fmt.Errorf("bgp.peers[%d]: %w", i, err)
		}
	}
	return sp, nil
}

func (sp *Speaker) peer(p table.BGPPeer) *api.Peer {
	hold := uint64(sp.cfg.HoldTime / time.Second)
	fam := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if p.Address.Is6() {
		fam = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, AuthPassword: string(p.Password)},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		Timers: &api.Timers{Config: &api.TimersConfig{HoldTime: hold, KeepaliveInterval: hold / 3,
			ConnectRetry: uint64(sp.cfg.ConnectRetry / time.Second), IdleHoldTimeAfterReset: 1}},
		AfiSafis: []*api.AfiSafi{{Config: &api.AfiSafiConfig{Family: fam, Enabled: true}}},
	}
}

// Announce makes vips the announced set: new ones are added and gone ones
// withdrawn. IPv4 VIPs go to IPv4 peers and IPv6 ones to IPv6 peers.
func (sp *Speaker) Announce(vips []netip.Prefix) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	want := map[netip.Prefix]bool{}
	for _, v := range vips {
		want[v.Masked()] = true
	}
	ctx := context.Background()
	for v, id := range sp.announced {
		if !want[v] {
			if err := sp.s.DeletePath(ctx, &api.DeletePathRequest{Family: family(v), Uuid: id}); err != nil {
				return fmt.Errorf("bgp: withdrawing %s: %w", v, err)
			}
			delete(sp.announced, v)
			sp.log.Info("bgp: withdrawn", "vip", v)
		}
	}
	var added []netip.Prefix
	for v := range want {
		if _, ok := sp.announced[v]; ok {
			continue
		}
		r, err := sp.s.AddPath(ctx, &api.AddPathRequest{Path: sp.path(v)})
		if err != nil {
			return fmt.Errorf("bgp: announcing %s: %w", v, err)
		}
		sp.announced[v] = r.Uuid
		added = append(added, v)
	}
	if len(added) > 0 {
		sort.Slice(added, func(i, j int) bool { return added[i].String() < added[j].String() })
		sp.log.Info("bgp: announced", "vips", added)
	}
	return nil
}

func family(v netip.Prefix) *api.Family {
	if v.Addr().Is4() {
		return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
}

// path is v as a locally originated route: origin IGP, and as next hop
// the configured one or the unspecified address, which GoBGP replaces with
// each session's local address.
func (sp *Speaker) path(v netip.Prefix) *api.Path {
	nlri, _ := anypb.New(&api.IPAddressPrefix{Prefix: v.Addr().String(), PrefixLen: uint32(v.Bits())})
	origin, _ := anypb.New(&api.OriginAttribute{Origin: 0})
	fam := family(v)
	var nh *anypb.Any
	if v.Addr().Is4() {
		hop := "0.0.0.0"
		if sp.cfg.NextHop.Is4() {
			hop = sp.cfg.NextHop.String()
		}
		nh, _ = anypb.New(&api.NextHopAttribute{NextHop: hop})
	} else {
		hop := "::"
		if sp.cfg.NextHop.Is6() {
			hop = sp.cfg.NextHop.String()
		}
		nh, _ = anypb.New(&api.MpReachNLRIAttribute{Family: fam, NextHops: []string{hop}, Nlris: []*anypb.Any{nlri}})
	}
	return &api.Path{Family: fam, Nlri: nlri, Pattrs: []*anypb.Any{origin, nh}}
}

// Announced lists the announced VIPs, in order.
func (sp *Speaker) Announced() []netip.Prefix {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	out := make([]netip.Prefix, 0, len(sp.announced))
	for v := range sp.announced {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// Peers reports every session.
func (sp *Speaker) Peers() []status.Peer {
	var out []status.Peer
	sp.s.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		out = append(out, peerState(p))
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

func peerState(p *api.Peer) status.Peer {
	st := status.Peer{Address: p.GetConf().GetNeighborAddress(), ASN: p.GetConf().GetPeerAsn(), State: "idle"}
	if s := p.GetState(); s != nil {
		if st.Address == "" {
			st.Address = s.NeighborAddress
		}
		st.ASN = max(st.ASN, s.PeerAsn)
		st.State = map[api.PeerState_SessionState]string{api.PeerState_IDLE: "idle", api.PeerState_CONNECT: "connect",
			api.PeerState_ACTIVE: "active", api.PeerState_OPENSENT: "opensent", api.PeerState_OPENCONFIRM: "openconfirm",
			api.PeerState_ESTABLISHED: "established"}[s.SessionState]
		if st.State == "" {
			st.State = "unknown"
		}
		st.Established = s.SessionState == api.PeerState_ESTABLISHED
		st.Flaps = s.Flops
	}
	if st.Established {
		if up := p.GetTimers().GetState().GetUptime(); up != nil {
			st.Since = up.AsTime().UTC()
		}
	}
	for _, a := range p.GetAfiSafis() {
		st.Advertised += a.GetState().GetAdvertised()
	}
	return st
}

// Stop ends every session (routers withdraw what it announced) and the
// speaker.
func (sp *Speaker) Stop() {
	if sp.stopWatch != nil {
		sp.stopWatch()
	}
	sp.s.StopBgp(context.Background(), &api.StopBgpRequest{})
	sp.s.Stop()
}

// logger passes GoBGP's warnings and errors to slog; its info and debug
// messages (every state change, every update) stay out of the service's
// log, which records session changes itself.
type logger struct{ l *slog.Logger }

func attrs(f gobgplog.Fields) []any {
	var a []any
	for k, v := range f {
		a = append(a, k, v)
	}
	return a
}

func (l *logger) Panic(msg string, f gobgplog.Fields) {
	l.l.Error("bgp: "+msg, attrs(f)...)
	panic(msg)
}
func (l *logger) Fatal(msg string, f gobgplog.Fields) { l.l.Error("bgp: "+msg, attrs(f)...) }
func (l *logger) Error(msg string, f gobgplog.Fields) { l.l.Error("bgp: "+msg, attrs(f)...) }
func (l *logger) Warn(msg string, f gobgplog.Fields)  { l.l.Warn("bgp: "+msg, attrs(f)...) }
func (l *logger) Info(string, gobgplog.Fields)        {}
func (l *logger) Debug(string, gobgplog.Fields)       {}
func (l *logger) SetLevel(gobgplog.LogLevel)          {}
func (l *logger) GetLevel() gobgplog.LogLevel         { return gobgplog.WarnLevel }
