// Package abi is what the C programs (bpf/) and Go share: the types of
// the maps' keys and values and of the headers the programs write, and
// the constants of director.h and gue.h (limits, counters, the wire),
// generated from the compiled objects' BTF (abi_gen.go, by
// bpf/internal/abigen at 'make generate'), so that the C headers are their
// only definition. It embeds no object and imports no eBPF library: the
// model, the wire format and the bind layout use it without linking the
// kernel's programs; package bpf (the objects) and the loader use it too.
package abi

// Short names for the generated ones, which are named after the C (struct
// dir_bind_key: DirBindKey; DIR_EXACT_SLOTS of enum dir_limit:
// DirLimitDIR_EXACT_SLOTS). They are aliases and conversions, so a
// changed header changes them too.

// The director's shared structs (director.h, gue.h).
type (
	Backend     = DirBackend
	Capture     = DirCapture // the backend program's is the same struct (capture.h)
	CaptureCPU  = DirCaptureCpu
	CaptureMeta = DirCaptureMeta
	Bind        = DirBind
	BindKey     = DirBindKey
	BindVal     = DirBindVal
	Config      = DirConfig
	Counters    = DirCounters
	ExactEntry  = DirExactEntry
	ExactKey    = DirExactKey
	ExactTable  = DirExactTable
	GroupEntry  = DirGroupEntry
	GroupKey    = DirGroupKey
	GroupLen    = DirGroupLen
	GroupTable  = DirGroupTable
	PortRange   = DirPortRange
	Row         = DirRow
	Table       = DirTable
	Traffic     = DirTraffic
	Registry    = DirRegistry
	History     = DirHistory
	HistRow     = DirHistRow
	HistGhost   = DirHistGhost
	QUICEntry   = DirQuicEntry
	QUICTable   = DirQuicTable
	QUICStats   = DirQuicStats
	AESKey      = DirAesKey
	GLBEncap    = GlbEncap
	Gue6Encap   = DirGue6Encap
	GUEHeader   = GlbGueHdr
	Counter     = DirCounter
)

// History's limits (enum dir_hist_limit).
const (
	HistHops   = int(DirHistLimitDIR_HIST_HOPS)
	HistRecord = int(DirHistLimitDIR_HIST_RECORD)
	HistEpochs = int(DirHistLimitDIR_HIST_EPOCHS)
	HistNone   = uint8(DirHistLimitDIR_HIST_NONE)
)

// Sizes and limits (enum dir_limit).
const (
	Rows        = int(DirLimitDIR_ROWS)
	MaxBackends = int(DirLimitDIR_MAX_BACKENDS)
	MaxBinds    = int(DirLimitDIR_MAX_BINDS)
	MaxTables   = int(DirLimitDIR_MAX_TABLES)
	MaxSlots    = int(DirLimitDIR_MAX_SLOTS)
	NameLen     = int(DirLimitDIR_NAME_LEN)
	ExactSlots  = uint32(DirLimitDIR_EXACT_SLOTS)
	ExactProbes = uint32(DirLimitDIR_EXACT_PROBES)
	GroupSlots  = uint32(DirLimitDIR_GROUP_SLOTS)
	GroupProbes = uint32(DirLimitDIR_GROUP_PROBES)
	GroupLens   = int(DirLimitDIR_GROUP_LENS)
	GroupRanges = int(DirLimitDIR_GROUP_RANGES)
	GroupScan   = int(DirLimitDIR_GROUP_SCAN)
	GroupTrie   = uint8(DirLimitDIR_GROUP_TRIE)
	BindGens    = uint32(DirLimitDIR_BIND_GENS)
)

// The multipliers of the exact-match hash (enum dir_exact_mult), as 64-bit
// words.
var ExactMult = [...]uint64{
	uint64(DirExactMultDIR_EXACT_K0HI)<<32 | uint64(DirExactMultDIR_EXACT_K0LO),
	uint64(DirExactMultDIR_EXACT_K1HI)<<32 | uint64(DirExactMultDIR_EXACT_K1LO),
	uint64(DirExactMultDIR_EXACT_K2HI)<<32 | uint64(DirExactMultDIR_EXACT_K2LO),
	uint64(DirExactMultDIR_EXACT_K3HI)<<32 | uint64(DirExactMultDIR_EXACT_K3LO),
	uint64(DirExactMultDIR_EXACT_K4HI)<<32 | uint64(DirExactMultDIR_EXACT_K4LO),
}

// Bind keys: what a trie entry names (enum dir_bind_kind), and address
// families (enum dir_family).
const (
	BindAddr  = uint8(DirBindKindDIR_BIND_ADDR)
	BindPort  = uint8(DirBindKindDIR_BIND_PORT)
	BindTable = uint8(DirBindKindDIR_BIND_TABLE)

	FamilyIPv4 = uint8(DirFamilyDIR_FAMILY_IPV4)
	FamilyIPv6 = uint8(DirFamilyDIR_FAMILY_IPV6)
)

// The wire: GUE and the outer IPv4 header (gue.h).
const (
	GUEPort           = uint16(GueConstGUE_PORT)
	GUEMaxHops        = int(GueConstGUE_MAX_HOPS)
	GUEPrivateTypeGLB = uint16(GueConstGUE_PRIVATE_TYPE_GLB)
	// The IPv6 underlay's (gue.h): its private data type and outer header.
	GUEPrivateTypeV6 = uint16(GueConstGUE_PRIVATE_TYPE_DIRECTOR_V6)
	IPv6Version      = uint8(GueConstGUE_IPV6VERSION)
	IPv6FlowMask     = uint32(GueConstGUE_IPV6FLOW_MASK)
	IPv6NextHeader   = uint8(GueConstGUE_IPV6NEXT_HEADER)
	IPv6HopLimit     = uint8(GueConstGUE_IPV6HOP_LIMIT)
	GUEHlenMask      = uint8(GueConstGUE_HLEN_MASK)
	GUEHlenVCShift   = uint(GueConstGUE_HLEN_VC_SHIFT)
	IPv4VersionIHL   = uint8(GueConstGUE_IPV4VERSION_IHL)
	IPv4DF           = uint16(GueConstGUE_IPV4DF)
	IPv4TTL          = uint8(GueConstGUE_IPV4TTL)
	IPv4Proto        = uint8(GueConstGUE_IPV4PROTO)
)

// A capture's lease (enum dir_capture_lease): the hook's on field is the
// lease's end, in units of 1<<CaptureLeaseShift ns of CLOCK_MONOTONIC.
const (
	CaptureLeaseShift = uint(DirCaptureLeaseDIR_CAPTURE_LEASE_SHIFT)
	CaptureLease      = uint32(DirCaptureLeaseDIR_CAPTURE_LEASE)
)

// XDP verdicts, as the kernel numbers them.
const (
	XDPPass = int(XdpActionXDP_PASS)
	XDPTX   = int(XdpActionXDP_TX)
)

// The datapath's global counters (enum dir_counter), by index.
const (
	CProcessed        = int(DirCounterDIR_C_PROCESSED)
	CMatched          = int(DirCounterDIR_C_MATCHED)
	CEncapsulated     = int(DirCounterDIR_C_ENCAPSULATED)
	CEncapBytes       = int(DirCounterDIR_C_ENCAPSULATED_BYTES)
	CBindFast         = int(DirCounterDIR_C_BIND_FAST)
	CBindGroup        = int(DirCounterDIR_C_BIND_GROUP)
	CPassNotIP        = int(DirCounterDIR_C_PASS_NOT_IP)
	CPassVLAN         = int(DirCounterDIR_C_PASS_VLAN)
	CPassMalformed    = int(DirCounterDIR_C_PASS_MALFORMED)
	CPassFragment     = int(DirCounterDIR_C_PASS_FRAGMENT)
	CPassIPv6Ext      = int(DirCounterDIR_C_PASS_IPV6EXT)
	CPassProto        = int(DirCounterDIR_C_PASS_PROTO)
	CPassICMPEchoOff  = int(DirCounterDIR_C_PASS_ICMP_ECHO_OFF)
	CPassNoBind       = int(DirCounterDIR_C_PASS_NO_BIND)
	CPassHeadersSplit = int(DirCounterDIR_C_PASS_HEADERS_SPLIT)
	CPassTooBig       = int(DirCounterDIR_C_PASS_TOO_BIG)
	CErrNoConfig      = int(DirCounterDIR_C_ERROR_NO_CONFIG)
	CErrNoTable       = int(DirCounterDIR_C_ERROR_NO_TABLE)
	CErrAdjustHead    = int(DirCounterDIR_C_ERROR_ADJUST_HEAD)
	CErrBounds        = int(DirCounterDIR_C_ERROR_BOUNDS)
	CGLBUnknownFormat = int(DirCounterDIR_C_GLB_UNKNOWN_FORMAT)
	CGLBNoMatching    = int(DirCounterDIR_C_GLB_NO_MATCHING_BIND)
	CGLBMatched       = int(DirCounterDIR_C_GLB_MATCHED)
	CICMPTooBig       = int(DirCounterDIR_C_ICMP_TOO_BIG)
	CTooBigEncap      = int(DirCounterDIR_C_TOO_BIG_ENCAPSULATED)
	// UDP to a table with QUIC-LB routing: routed by connection ID, or
	// sent by the row, and why.
	CQUICRouted      = int(DirCounterDIR_C_QUIC_ROUTED)
	CQUICShort       = int(DirCounterDIR_C_QUIC_FALLBACK_SHORT)
	CQUICCIDLen      = int(DirCounterDIR_C_QUIC_FALLBACK_CID_LEN)
	CQUICUnroutable  = int(DirCounterDIR_C_QUIC_FALLBACK_UNROUTABLE)
	CQUICOtherConfig = int(DirCounterDIR_C_QUIC_FALLBACK_OTHER_CONFIG)
	CQUICUnknownID   = int(DirCounterDIR_C_QUIC_FALLBACK_UNKNOWN_ID)
	// Of CQUICRouted: ICMP errors sent by the ID of the packet they quote.
	CQUICICMPRouted = int(DirCounterDIR_C_QUIC_ICMP_ROUTED)
	NumCounters     = int(DirCounterDIR_C_MAX)
)

// QUIC-LB routing (enum dir_quic_limit): the server-ID table's size and
// probes, the longest IDs, the config rotation that is not routed, the
// keys each slot has in quic_ids and quic_keys, and the bytes read after an
// ID's first octet.
const (
	QUICSlots      = uint32(DirQuicLimitDIR_QUIC_SLOTS)
	QUICProbes     = uint32(DirQuicLimitDIR_QUIC_PROBES)
	QUICMaxSID     = int(DirQuicLimitDIR_QUIC_MAX_SID)
	QUICMaxCID     = int(DirQuicLimitDIR_QUIC_MAX_CID)
	QUICUnroutable = uint8(DirQuicLimitDIR_QUIC_UNROUTABLE)
	QUICConfigs    = uint32(DirQuicLimitDIR_QUIC_CONFIGS)
	QUICRead       = int(DirQuicLimitDIR_QUIC_READ)
)

// QUICKey is where quic_ids and quic_keys keep slot's config of config
// rotation c (bpf/quic.h, dir_quic_key).
func QUICKey(slot int, c uint8) uint32 {
	return uint32(slot)*QUICConfigs + uint32(c)
}

// QUIC-LB's counters per table and config (enum dir_quic_stat_limit): the
// entries a table has in map quic_stats, and the one for packets whose ID
// was not read.
const (
	QUICStatKeys = int(DirQuicStatLimitDIR_QUIC_STAT_KEYS)
	QUICNoID     = uint8(DirQuicStatLimitDIR_QUIC_NO_ID)
)

// The multipliers of the server-ID hash (enum dir_quic_limit), as 64-bit
// words.
var QUICMult = [...]uint64{
	uint64(DirQuicLimitDIR_QUIC_K0HI)<<32 | uint64(DirQuicLimitDIR_QUIC_K0LO),
	uint64(DirQuicLimitDIR_QUIC_K1HI)<<32 | uint64(DirQuicLimitDIR_QUIC_K1LO),
}
