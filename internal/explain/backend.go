package explain

import (
	"fmt"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
)

// Backend is what the backend program does with one frame, and why.
type Backend struct {
	Packet string `json:"packet"`
	// For GUE for this host: the outer destination, the hops listed and
	// the index of the next, and the inner flow.
	Outer string   `json:"outer,omitempty"`
	Hops  []string `json:"hops,omitempty"`
	Next  int      `json:"next_hop_index"`
	// SecondChanceIn is set on GUE another backend sent on to this one.
	SecondChanceIn bool  `json:"second_chance_in,omitempty"`
	Flow           *Flow `json:"flow,omitempty"`
	// Socket is what the socket lookup found for a TCP segment that is
	// not a SYN: "connection", "listener only" or "none".
	Socket string `json:"socket,omitempty"`
	// NextHop and Route are where a packet of a connection this host does
	// not know is sent on (second chance), and how.
	NextHop string `json:"next_hop,omitempty"`
	Route   string `json:"route,omitempty"`
	// Verdict is the XDP action; Action what it means here (decapsulate,
	// forward, pass, drop); Counter the backend counter it moves; Why, in
	// words.
	Verdict string `json:"verdict"`
	Action  string `json:"action"`
	Counter string `json:"counter"`
	Why     string `json:"why"`
	// Doubt is set when a lookup on the host failed, so that part of the
	// answer is a guess.
	Doubt string `json:"doubt,omitempty"`
}

// ExplainBackend runs frame through the backend program's model with cfg
// and host (what the pinned program holds, and the kernel's answers).
func ExplainBackend(cfg model.BackendConfig, host model.BackendHost, frame []byte) Backend {
	r := model.Backend(cfg, host, frame)
	x := Backend{Packet: pkt.Describe(frame), Next: r.Next, SecondChanceIn: r.SecondChanceIn, Counter: abi.BackendCounterNames[r.Reason]}
	switch r.Verdict {
	case model.XDPPass:
		x.Verdict = "XDP_PASS"
	case model.XDPTX:
		x.Verdict = "XDP_TX"
	case model.XDPDrop:
		x.Verdict = "XDP_DROP"
	}
	if r.Outer.IsValid() {
		x.Outer = r.Outer.String()
		for _, h := range r.Hops {
			x.Hops = append(x.Hops, h.String())
		}
	}
	if r.Proto != 0 {
		x.Flow = &Flow{Proto: protoName(r.Proto, false), Client: r.Client.Addr().String(), ClientPort: r.Client.Port(),
			VIP: r.VIP.Addr().String(), VIPPort: r.VIP.Port()}
	}
	if r.Proto == 6 && !(r.SYN && !r.ACK) && r.InnerLocal {
		switch {
		case r.Socket && !r.Listener:
			x.Socket = "connection"
		case r.Listener:
			x.Socket = "listener only"
		default:
			x.Socket = "none"
		}
	}
	if r.NextHop.IsValid() {
		x.NextHop, x.Route = r.NextHop.String(), r.Route.Why
		if r.Reason == model.BeDropUntrustedHop {
			x.Route = "not trusted, so not looked up"
		}
	}
	x.Action, x.Why = backendWhy(r)
	return x
}

// backendWhy says what the program's decision means, and why it took it.
func backendWhy(r model.BackendResult) (action, why string) {
	unknown := "this host does not know the connection (" + socketWords(r) + ") and it is not a SYN"
	switch r.Reason {
	case model.BeDecapSyn:
		return "decapsulate", "a TCP SYN: a new connection, taken here (the inner packet goes to the stack)"
	case model.BeDecapKnown:
		return "decapsulate", "this host has the connection (a socket for it): taken here"
	case model.BeDecapNotTCP:
		return "decapsulate", "not TCP: taken here (second chance is for TCP, whose sockets say whose a connection is)"
	case model.BeDecapLastHop:
		if r.NoSecond {
			return "decapsulate", unknown + ", but second chance is off ('backend attach --no-second-chance'): taken here"
		}
		if r.NoTrust {
			return "decapsulate", unknown + ", but no directors and backends are listed ('backend attach --trust'), so nothing is sent on: taken here"
		}
		return "decapsulate", fmt.Sprintf("%s, and no hop is left to try (next hop index %d of %d listed): taken here", unknown, r.Next, len(r.Hops))
	case model.BeForwarded:
		return "forward", fmt.Sprintf("%s: sent on to the next hop %s (second chance)", unknown, r.NextHop)
	case model.BeForwardStack:
		return "forward", fmt.Sprintf("%s: sent on to the next hop %s (second chance), through the kernel", unknown, r.NextHop)
	case model.BeDropNoRoute:
		return "drop", fmt.Sprintf("%s, and the next hop %s cannot be reached (second chance fails): %s", unknown, r.NextHop, r.Route.Why)
	case model.BePassNotGUE:
		return "pass", fmt.Sprintf("not GUE for this host (UDP to port %d of an address the program accepts): passed untouched", abi.GUEPort)
	case model.BeDropMalformed:
		return "drop", "GUE for this host, but its GUE header, hop list or inner packet is broken"
	case model.BeDropNoConfig:
		return "drop", "the backend program has no settings: attach it with 'director backend attach IFACE'"
	case model.BeDropUntrusted:
		return "drop", fmt.Sprintf("GUE from %s, not a director or backend this host trusts ('backend attach --trust'): spoofed or misdirected, never taken or sent on", r.Source)
	case model.BeDropUntrustedHop:
		return "drop", fmt.Sprintf("%s, and the next hop %s is not a director or backend this host trusts ('backend attach --trust'): never sent there", unknown, r.NextHop)
	case model.BeDropNotLocal:
		return "drop", fmt.Sprintf("the inner packet is to %s, not one of the addresses the program accepts: it never relays. Put the VIP (or its prefix) on lo; 'backend run' follows the host's local addresses, 'backend attach' takes them when it runs", r.VIP.Addr())
	}
	return "?", "unknown counter"
}

func socketWords(r model.BackendResult) string {
	if r.Listener {
		return "only a listener for its port"
	}
	return "no socket for it"
}
