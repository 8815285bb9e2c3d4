package table

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/director/director/bpf/abi"
)

// GLB's binary format fixes these; configs are held to them so that every
// accepted config can be written as a GLB table. The datapath is sized by
// the same (director.h): equal checks, below, that they agree.
const (
	Rows        = 0x10000
	MaxBackends = 256
	MaxBinds    = 256
)

// Compile-time checks that the limits and bits written here are
// director.h's (through package abi): a difference either way makes a
// negative constant, which a uint cannot hold, and the build fails.
const (
	_ = uint(Rows-abi.Rows) + uint(abi.Rows-Rows)
	_ = uint(MaxBackends-abi.MaxBackends) + uint(abi.MaxBackends-MaxBackends)
	_ = uint(MaxBinds-abi.MaxBinds) + uint(abi.MaxBinds-MaxBinds)
	_ = uint(MaxServerIDLen-abi.QUICMaxSID) + uint(abi.QUICMaxSID-MaxServerIDLen)
	_ = uint(MaxCIDLen-abi.QUICMaxCID) + uint(abi.QUICMaxCID-MaxCIDLen)
	_ = uint(MaxQUICConfigID+1-int(abi.QUICUnroutable)) + uint(int(abi.QUICUnroutable)-MaxQUICConfigID-1)
	_ = uint(int(HashSrcAddr)-int(abi.DirHashFieldDIR_HASH_SRC_ADDR)) + uint(int(abi.DirHashFieldDIR_HASH_SRC_ADDR)-int(HashSrcAddr))
	_ = uint(int(HashDstAddr)-int(abi.DirHashFieldDIR_HASH_DST_ADDR)) + uint(int(abi.DirHashFieldDIR_HASH_DST_ADDR)-int(HashDstAddr))
	_ = uint(int(HashSrcPort)-int(abi.DirHashFieldDIR_HASH_SRC_PORT)) + uint(int(abi.DirHashFieldDIR_HASH_SRC_PORT)-int(HashSrcPort))
	_ = uint(int(HashDstPort)-int(abi.DirHashFieldDIR_HASH_DST_PORT)) + uint(int(abi.DirHashFieldDIR_HASH_DST_PORT)-int(HashDstPort))
)

// Config is a forwarding-table config in GitHub GLB Director's JSON format.
type Config struct {
	Tables []TableConfig
	// Checks is the top-level "healthchecks" block of the file
	// glb-healthcheck reads (forwarding_table.src.json), with GLB's
	// defaults when it is absent.
	Checks CheckSettings
	// Warnings are accepted oddities worth an operator's glance.
	Warnings []string
}

// CheckSettings is how backends are health-checked: every Interval, each
// check given Timeout; Rise consecutive passes bring a backend up, Fall
// consecutive failures take it down. GLB's "trigger" sets both; "rise"
// and "fall" (director's extension) set them apart.
type CheckSettings struct {
	Interval, Timeout time.Duration
	Rise, Fall        int
}

// DefaultCheckSettings are glb-healthcheck's: 2 s, 1 s, trigger 3.
func DefaultCheckSettings() CheckSettings {
	return CheckSettings{Interval: 2 * time.Second, Timeout: time.Second, Rise: 3, Fall: 3}
}

// Checked reports whether any backend's health is left to the checks
// (its "healthy" is absent).
func (c *Config) Checked() bool {
	for i := range c.Tables {
		for _, b := range c.Tables[i].Backends {
			if b.Checked {
				return true
			}
		}
	}
	return false
}

// TableConfig is one service: the addresses it answers on and the backends
// behind it.
type TableConfig struct {
	Name     string // optional; unique within a config when present
	HashKey  Key    // keys the per-packet flow hash
	Seed     Key    // keys the rendezvous scores that build the rows
	Binds    []Bind
	Backends []Backend
	// Balance is the balance factor F in BalanceScale units (1010 is
	// 1.01): no good backend is primary for more than F times its fair
	// share of rows (balance.go). 0 means off: GLB's table.
	Balance uint16
	// QUIC is the table's QUIC-LB routing (its "quic" block); the zero
	// QUIC is none.
	QUIC QUIC
	// History is its history_s and history_hops (history.go); a config
	// that gives none has DefaultHistory. The zero value remembers
	// nothing.
	History HistorySettings
}

// QUIC is a table's QUIC-LB routing (draft-ietf-quic-load-balancers;
// docs/wire.md): its configs, the first (the "quic" object, or the
// list's first) and the others of a "quic" list, for config rotation. The
// zero QUIC is none. The datapath sends a UDP packet whose destination
// connection ID carries one of the configs' rotation bits and names a
// serving backend's server ID in that config to that backend. The first
// config's fields are QUIC's own (q.ConfigID); Configs lists them all.
type QUIC struct {
	QUICConfig
	// More are the other configs, in the order listed, then zero ones.
	More [MaxQUICConfigID]QUICConfig
}

// QUICConfig is one QUIC-LB config: its servers write ConfigID in the top
// three bits of each connection ID they issue, then their ServerIDLen-byte
// server ID (Backend.ServerID, or its MoreServerIDs for the table's other
// configs), then NonceLen bytes of their own. The zero QUICConfig is none.
type QUICConfig struct {
	ConfigID    uint8 `json:"config_id"`     // 0 to MaxQUICConfigID
	ServerIDLen uint8 `json:"server_id_len"` // 1 to MaxServerIDLen
	NonceLen    uint8 `json:"nonce_len"`     // MinNonceLen and up, with 1 + ServerIDLen + NonceLen <= MaxCIDLen
	// Encrypted: the server ID and nonce are encrypted with Key
	// (draft-ietf-quic-load-balancers: single pass at 16 bytes, else four
	// passes; table/quiclb/cidcipher). Key is a secret: never marshalled
	// or printed (Key's methods redact it), covered by the fingerprint and
	// the input digest without being revealed.
	Encrypted bool `json:"encrypted,omitempty"`
	Key       Key  `json:"-"`
}

// Configs is every config of q, the first first; none when q is off.
func (q QUIC) Configs() []QUICConfig {
	if !q.On() {
		return nil
	}
	out := []QUICConfig{q.QUICConfig}
	for _, c := range q.More {
		if c.On() {
			out = append(out, c)
		}
	}
	return out
}

// Config is q's config of config rotation id and its place in Configs.
func (q QUIC) Config(id uint8) (QUICConfig, int, bool) {
	for i, c := range q.Configs() {
		if c.ConfigID == id {
			return c, i, true
		}
	}
	return QUICConfig{}, -1, false
}

// SortQUIC puts tc's QUIC-LB configs in increasing config ID, each
// backend's server IDs with them: the order the kernel reads them back in
// (it keeps none), so that a table read back equals the one applied. The
// order decides no packet.
func (tc *TableConfig) SortQUIC() {
	cs := tc.QUIC.Configs()
	if len(cs) < 2 {
		return
	}
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(cs[a].ConfigID) - int(cs[b].ConfigID) })
	var q QUIC
	for i, o := range order {
		if i == 0 {
			q.QUICConfig = cs[o]
		} else {
			q.More[i-1] = cs[o]
		}
	}
	tc.QUIC = q
	for k := range tc.Backends {
		b := &tc.Backends[k]
		ids := make([]ServerID, len(cs))
		for i := range cs {
			ids[i] = b.ServerIDIn(i)
		}
		for i, o := range order {
			b.SetServerIDIn(i, ids[o])
		}
	}
}

// String describes q as the tools print it: its configs, "; " between.
func (q QUIC) String() string {
	if !q.On() {
		return "off"
	}
	var parts []string
	for _, c := range q.Configs() {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, "; ")
}

// QUIC-LB's limits: config rotation 0b111 marks an ID not to route by;
// QUIC v1's connection IDs are at most 20 bytes; the draft asks for a
// nonce of at least 4.
const (
	MaxQUICConfigID = 6
	MaxServerIDLen  = 15
	MinNonceLen     = 4
	MaxCIDLen       = 20
)

// On reports whether the config is one (the table routes QUIC by
// connection ID when its first is).
func (q QUICConfig) On() bool { return q.ServerIDLen != 0 }

// String describes q as the tools print it.
func (q QUICConfig) String() string {
	if !q.On() {
		return "off"
	}
	s := fmt.Sprintf("config %d, %d-byte server IDs, %d-byte nonces", q.ConfigID, q.ServerIDLen, q.NonceLen)
	if q.Encrypted {
		s += ", encrypted"
	}
	return s
}

// CIDLen is the length of the connection IDs its servers issue, which is
// also what a short header's ID is taken to be.
func (q QUICConfig) CIDLen() int { return 1 + int(q.ServerIDLen) + int(q.NonceLen) }

// ServerID is a backend's QUIC-LB server ID, its raw bytes ("" for none).
// It prints as hex.
type ServerID string

func (s ServerID) String() string { return hex.EncodeToString([]byte(s)) }

// Key is a 16-byte secret. It formats as "<redacted>" so it cannot leak
// through a log line or an error message by accident.
type Key [16]byte

func (Key) String() string               { return "<redacted>" }
func (Key) GoString() string             { return "<redacted>" }
func (Key) MarshalJSON() ([]byte, error) { return []byte(`"<redacted>"`), nil }

// Bind is a destination a table answers on: an address or prefix, a
// protocol and a port range.
type Bind struct {
	// Prefix keeps the address exactly as written (host bits included), as
	// GLB's binary format does; matching masks it.
	Prefix    netip.Prefix
	Proto     Proto
	PortStart uint16
	PortEnd   uint16
}

func (b Bind) String() string {
	addr := b.Prefix.Addr().String()
	if b.Prefix.Bits() != b.Prefix.Addr().BitLen() {
		addr = b.Prefix.String()
	}
	if b.Prefix.Addr().Is6() {
		addr = "[" + addr + "]"
	}
	ports := strconv.Itoa(int(b.PortStart))
	if b.PortEnd != b.PortStart {
		ports += "-" + strconv.Itoa(int(b.PortEnd))
	}
	return fmt.Sprintf("%s %s:%s", b.Proto, addr, ports)
}

// Matches reports whether a packet to dst:port over proto is for this bind.
func (b Bind) Matches(dst netip.Addr, proto Proto, port uint16) bool {
	return proto == b.Proto && port >= b.PortStart && port <= b.PortEnd &&
		dst.Is4() == b.Prefix.Addr().Is4() && b.Prefix.Masked().Contains(dst)
}

// Proto is an IP protocol number.
type Proto uint8

const (
	ProtoTCP Proto = 6
	ProtoUDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return "proto" + strconv.Itoa(int(p))
}

// ParseProto parses "tcp" or "udp".
func ParseProto(s string) (Proto, error) {
	switch s {
	case "tcp":
		return ProtoTCP, nil
	case "udp":
		return ProtoUDP, nil
	}
	return 0, fmt.Errorf("%q is not a protocol (want \"tcp\" or \"udp\")", s)
}

// Backend is a server behind a table.
type Backend struct {
	IP      netip.Addr
	State   State
	Healthy bool
	// Checked is set when the config leaves the backend's health to the
	// checks (no "healthy"): Healthy is then what they found, and false
	// until they have. A present "healthy" is the operator's, and the
	// checks do not change it.
	Checked      bool
	Healthchecks *Healthchecks // nil when absent
	// Weight is the backend's share of primary rows relative to the
	// table's other backends (director's extension), 1 to MaxWeight; 0
	// means it was not given, which counts as 1.
	Weight uint16
	// Domain is the backend's failure domain (director's extension: a
	// rack, a power feed), "" when none was given. A row's two hops are
	// kept in different domains where the table has more than one.
	Domain string
	// ServerID is its QUIC-LB server ID in the table's first QUIC config
	// (every backend of a table with QUIC has one); "" otherwise.
	// MoreServerIDs are its IDs in the table's other configs, by their
	// place in QUIC.More.
	ServerID      ServerID
	MoreServerIDs [MaxQUICConfigID]ServerID
}

// ServerIDIn is the backend's server ID in its table's config at place i
// of QUIC.Configs.
func (b Backend) ServerIDIn(i int) ServerID {
	if i == 0 {
		return b.ServerID
	}
	return b.MoreServerIDs[i-1]
}

// MarshalJSON writes q as a config gives it: one config as an object, several
// as a list. Keys stay out (Key's own MarshalJSON is never reached).
func (q QUIC) MarshalJSON() ([]byte, error) {
	cs := q.Configs()
	if len(cs) == 1 {
		return json.Marshal(cs[0])
	}
	if cs == nil {
		cs = []QUICConfig{}
	}
	return json.Marshal(cs)
}

// UnmarshalJSON reads what MarshalJSON writes (keys are not in it).
func (q *QUIC) UnmarshalJSON(data []byte) error {
	var cs []QUICConfig
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		var c QUICConfig
		if err := json.Unmarshal(data, &c); err != nil {
			return err
		}
		cs = []QUICConfig{c}
	} else if err := json.Unmarshal(data, &cs); err != nil {
		return err
	}
	if len(cs) > MaxQUICConfigID+1 {
		return fmt.Errorf("%d QUIC configs: at most %d", len(cs), MaxQUICConfigID+1)
	}
	*q = QUIC{}
	for i, c := range cs {
		if i == 0 {
			q.QUICConfig = c
		} else {
			q.More[i-1] = c
		}
	}
	return nil
}

// ServerIDsOf is b's server IDs in q as the tools print them: hex, and
// in a table of several configs, each after its config ID
// ("1:5e01 2:5e01"); "" where q is off.
func (q QUIC) ServerIDsOf(b Backend) string {
	cs := q.Configs()
	if len(cs) < 2 {
		if len(cs) == 0 {
			return ""
		}
		return b.ServerID.String()
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%d:%s", c.ConfigID, b.ServerIDIn(i))
	}
	return strings.Join(parts, " ")
}

// SetServerIDIn sets the backend's server ID in its table's config at
// place i of QUIC.Configs.
func (b *Backend) SetServerIDIn(i int, id ServerID) {
	if i == 0 {
		b.ServerID = id
	} else {
		b.MoreServerIDs[i-1] = id
	}
}

// MaxWeight is the largest weight a backend may have.
const MaxWeight = 65535

// W is the backend's weight, 1 when none was given.
func (b Backend) W() uint16 { return max(b.Weight, 1) }

// Good reports whether the backend may be a primary: active or filling, and
// healthy.
func (b Backend) Good() bool {
	return (b.State == StateActive || b.State == StateFilling) && b.Healthy
}

// Serving reports whether QUIC packets that name the backend's server ID
// go to it: active, filling or draining (a drained backend keeps its
// connections), and healthy.
func (b Backend) Serving() bool {
	return (b.State == StateActive || b.State == StateFilling || b.State == StateDraining) && b.Healthy
}

// Healthchecks is GLB's per-backend health-check block; glb-healthcheck
// reads it, the table build does not.
type Healthchecks struct {
	HTTP    *int    `json:"http,omitempty"`
	HTTPURI *string `json:"http_uri,omitempty"`
	GUE     *int    `json:"gue,omitempty"`
	FOU     *int    `json:"fou,omitempty"`
	TCP     *int    `json:"tcp,omitempty"`
}

// State is a backend's administrative state.
type State uint8

const (
	StateActive State = iota
	StateFilling
	StateDraining
	StateInactive
	// StateDrainingInactive comes only from GLB binary tables, whose format
	// stores draining and inactive as the same value.
	StateDrainingInactive
)

var stateNames = [...]string{"active", "filling", "draining", "inactive", "draining/inactive"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state" + strconv.Itoa(int(s))
}

// ParseState parses a config state name.
func ParseState(s string) (State, error) {
	for i, n := range stateNames[:StateDrainingInactive] {
		if s == n {
			return State(i), nil
		}
	}
	return 0, fmt.Errorf("%q is not a state (want active, filling, draining or inactive)", s)
}

// SameAs compares states the way GLB's binary format can tell them apart.
func (s State) SameAs(o State) bool {
	if s == o {
		return true
	}
	di := func(x State) bool { return x == StateDraining || x == StateInactive || x == StateDrainingInactive }
	return (s == StateDrainingInactive || o == StateDrainingInactive) && di(s) && di(o)
}

// FieldError is one problem in a config, at a JSON path such as
// tables[1].backends[3].ip.
type FieldError struct {
	Path string
	Msg  string
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// ErrorList is every problem found in a config, in input order.
type ErrorList []*FieldError

// maxReported bounds how many problems one error message lists.
const maxReported = 50

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i == maxReported {
			fmt.Fprintf(&b, "\n... and %d more problems", len(l)-maxReported)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}
