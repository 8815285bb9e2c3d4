package table

import (
	"net/netip"
	"time"
)

// BGP is how 'director run' announces the VIPs to the routers in front of
// a fleet of directors (a director extension to GLB's director.conf): an
// eBGP or iBGP session to each peer, each VIP (a bind's address as a host
// route, or a prefix bind's prefix) announced with the session's local
// address as next hop unless NextHop is set.
type BGP struct {
	ASN      uint32
	RouterID netip.Addr // IPv4, as BGP identifiers are
	Peers    []BGPPeer
	// HoldTime is proposed to every peer (0 disables keepalives, as BGP
	// allows); keepalives go every third of it.
	HoldTime time.Duration
	// Drain is how long a stopping service waits after withdrawing its
	// VIPs, so routers move flows away before it exits.
	Drain time.Duration
	// ConnectRetry is the wait between attempts to reach a peer.
	ConnectRetry time.Duration
	// NextHop, when valid, replaces the session's local address.
	NextHop netip.Addr
	// WithdrawWhenDown withdraws a VIP whose every table has no healthy
	// backend, so routers send its traffic to directors that have one.
	WithdrawWhenDown bool
}

// BGPPeer is one router.
type BGPPeer struct {
	Address  netip.Addr
	ASN      uint32
	Port     uint16 // 179 by default
	Password Secret // TCP MD5 (RFC 2385); empty for none
}

// Secret is a password: it formats as "<redacted>", so it cannot leak into
// a log, an error or a plan.
type Secret string

func (Secret) String() string               { return "<redacted>" }
func (Secret) GoString() string             { return "<redacted>" }
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"<redacted>"`), nil }

// BGP defaults.
const (
	DefaultHoldTime     = 9 * time.Second
	DefaultDrain        = 5 * time.Second
	DefaultConnectRetry = 5 * time.Second
)
