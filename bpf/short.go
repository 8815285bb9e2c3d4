package bpf

// Short names for what bpf2go generates. bpf2go names a type after its
// object and its C name (struct dir_bind_key becomes DirectorDirBindKey)
// and an enum member after both again (DIR_EXACT_SLOTS becomes
// DirectorDirLimitDIR_EXACT_SLOTS). The C headers stay the only definition:
// these are aliases, so a changed header changes them too.

// The director's shared structs (director.h, gue.h).
type (
	Backend     = DirectorDirBackend
	Capture     = DirectorDirCapture // the backend program's is the same struct (capture.h)
	CaptureCPU  = DirectorDirCaptureCpu
	CaptureMeta = DirectorDirCaptureMeta
	Bind        = DirectorDirBind
	BindKey     = DirectorDirBindKey
	BindVal     = DirectorDirBindVal
	Config      = DirectorDirConfig
	Counters    = DirectorDirCounters
	ExactEntry  = DirectorDirExactEntry
	ExactKey    = DirectorDirExactKey
	ExactTable  = DirectorDirExactTable
	GroupEntry  = DirectorDirGroupEntry
	GroupKey    = DirectorDirGroupKey
	GroupLen    = DirectorDirGroupLen
	GroupTable  = DirectorDirGroupTable
	PortRange   = DirectorDirPortRange
	Row         = DirectorDirRow
	Table       = DirectorDirTable
	Traffic     = DirectorDirTraffic
	Registry    = DirectorDirRegistry
	QUICEntry   = DirectorDirQuicEntry
	QUICTable   = DirectorDirQuicTable
	GLBEncap    = DirectorGlbEncap
	Gue6Encap   = DirectorDirGue6Encap
	GUEHeader   = DirectorGlbGueHdr
	Counter     = DirectorDirCounter
	BeConfig    = BackendBeConfig
	BeCounters  = BackendBeCounters
	TgConfig    = LabTgConfig
	TgFrame     = LabTgFrame
)

// Sizes and limits (enum dir_limit).
const (
	Rows        = int(DirectorDirLimitDIR_ROWS)
	MaxBackends = int(DirectorDirLimitDIR_MAX_BACKENDS)
	MaxBinds    = int(DirectorDirLimitDIR_MAX_BINDS)
	MaxTables   = int(DirectorDirLimitDIR_MAX_TABLES)
	MaxSlots    = int(DirectorDirLimitDIR_MAX_SLOTS)
	NameLen     = int(DirectorDirLimitDIR_NAME_LEN)
	ExactSlots  = uint32(DirectorDirLimitDIR_EXACT_SLOTS)
	ExactProbes = uint32(DirectorDirLimitDIR_EXACT_PROBES)
	GroupSlots  = uint32(DirectorDirLimitDIR_GROUP_SLOTS)
	GroupProbes = uint32(DirectorDirLimitDIR_GROUP_PROBES)
	GroupLens   = int(DirectorDirLimitDIR_GROUP_LENS)
	GroupRanges = int(DirectorDirLimitDIR_GROUP_RANGES)
	GroupScan   = int(DirectorDirLimitDIR_GROUP_SCAN)
	GroupTrie   = uint8(DirectorDirLimitDIR_GROUP_TRIE)
	BindGens    = uint32(DirectorDirLimitDIR_BIND_GENS)

	TgMaxFrame  = int(LabTgLimitTG_MAX_FRAME)
	TgMaxFrames = int(LabTgLimitTG_MAX_FRAMES)
)

// The multipliers of the exact-match hash (enum dir_exact_mult), as 64-bit
// words.
var ExactMult = [...]uint64{
	uint64(DirectorDirExactMultDIR_EXACT_K0HI)<<32 | uint64(DirectorDirExactMultDIR_EXACT_K0LO),
	uint64(DirectorDirExactMultDIR_EXACT_K1HI)<<32 | uint64(DirectorDirExactMultDIR_EXACT_K1LO),
	uint64(DirectorDirExactMultDIR_EXACT_K2HI)<<32 | uint64(DirectorDirExactMultDIR_EXACT_K2LO),
	uint64(DirectorDirExactMultDIR_EXACT_K3HI)<<32 | uint64(DirectorDirExactMultDIR_EXACT_K3LO),
	uint64(DirectorDirExactMultDIR_EXACT_K4HI)<<32 | uint64(DirectorDirExactMultDIR_EXACT_K4LO),
}

// Bind keys: what a trie entry names (enum dir_bind_kind), and address
// families (enum dir_family).
const (
	BindAddr  = uint8(DirectorDirBindKindDIR_BIND_ADDR)
	BindPort  = uint8(DirectorDirBindKindDIR_BIND_PORT)
	BindTable = uint8(DirectorDirBindKindDIR_BIND_TABLE)

	FamilyIPv4 = uint8(DirectorDirFamilyDIR_FAMILY_IPV4)
	FamilyIPv6 = uint8(DirectorDirFamilyDIR_FAMILY_IPV6)
)

// The wire: GUE and the outer IPv4 header (gue.h).
const (
	GUEPort           = uint16(DirectorGueConstGUE_PORT)
	GUEMaxHops        = int(DirectorGueConstGUE_MAX_HOPS)
	GUEPrivateTypeGLB = uint16(DirectorGueConstGUE_PRIVATE_TYPE_GLB)
	// The IPv6 underlay's (gue.h): its private data type and outer header.
	GUEPrivateTypeV6 = uint16(DirectorGueConstGUE_PRIVATE_TYPE_DIRECTOR_V6)
	IPv6Version      = uint8(DirectorGueConstGUE_IPV6VERSION)
	IPv6FlowMask     = uint32(DirectorGueConstGUE_IPV6FLOW_MASK)
	IPv6NextHeader   = uint8(DirectorGueConstGUE_IPV6NEXT_HEADER)
	IPv6HopLimit     = uint8(DirectorGueConstGUE_IPV6HOP_LIMIT)
	GUEHlenMask      = uint8(DirectorGueConstGUE_HLEN_MASK)
	GUEHlenVCShift   = uint(DirectorGueConstGUE_HLEN_VC_SHIFT)
	IPv4VersionIHL   = uint8(DirectorGueConstGUE_IPV4VERSION_IHL)
	IPv4DF           = uint16(DirectorGueConstGUE_IPV4DF)
	IPv4TTL          = uint8(DirectorGueConstGUE_IPV4TTL)
	IPv4Proto        = uint8(DirectorGueConstGUE_IPV4PROTO)
)

// A capture's lease (enum dir_capture_lease): the hook's on field is the
// lease's end, in units of 1<<CaptureLeaseShift ns of CLOCK_MONOTONIC.
const (
	CaptureLeaseShift = uint(DirectorDirCaptureLeaseDIR_CAPTURE_LEASE_SHIFT)
	CaptureLease      = uint32(DirectorDirCaptureLeaseDIR_CAPTURE_LEASE)
)

// XDP verdicts, as the kernel numbers them.
const (
	XDPPass = int(DirectorXdpActionXDP_PASS)
	XDPTX   = int(DirectorXdpActionXDP_TX)
)

// The datapath's global counters (enum dir_counter), by index.
const (
	CProcessed        = int(DirectorDirCounterDIR_C_PROCESSED)
	CMatched          = int(DirectorDirCounterDIR_C_MATCHED)
	CEncapsulated     = int(DirectorDirCounterDIR_C_ENCAPSULATED)
	CEncapBytes       = int(DirectorDirCounterDIR_C_ENCAPSULATED_BYTES)
	CBindFast         = int(DirectorDirCounterDIR_C_BIND_FAST)
	CBindGroup        = int(DirectorDirCounterDIR_C_BIND_GROUP)
	CPassNotIP        = int(DirectorDirCounterDIR_C_PASS_NOT_IP)
	CPassVLAN         = int(DirectorDirCounterDIR_C_PASS_VLAN)
	CPassMalformed    = int(DirectorDirCounterDIR_C_PASS_MALFORMED)
	CPassFragment     = int(DirectorDirCounterDIR_C_PASS_FRAGMENT)
	CPassIPv6Ext      = int(DirectorDirCounterDIR_C_PASS_IPV6EXT)
	CPassProto        = int(DirectorDirCounterDIR_C_PASS_PROTO)
	CPassICMPEchoOff  = int(DirectorDirCounterDIR_C_PASS_ICMP_ECHO_OFF)
	CPassNoBind       = int(DirectorDirCounterDIR_C_PASS_NO_BIND)
	CPassHeadersSplit = int(DirectorDirCounterDIR_C_PASS_HEADERS_SPLIT)
	CPassTooBig       = int(DirectorDirCounterDIR_C_PASS_TOO_BIG)
	CErrNoConfig      = int(DirectorDirCounterDIR_C_ERROR_NO_CONFIG)
	CErrNoTable       = int(DirectorDirCounterDIR_C_ERROR_NO_TABLE)
	CErrAdjustHead    = int(DirectorDirCounterDIR_C_ERROR_ADJUST_HEAD)
	CErrBounds        = int(DirectorDirCounterDIR_C_ERROR_BOUNDS)
	CGLBUnknownFormat = int(DirectorDirCounterDIR_C_GLB_UNKNOWN_FORMAT)
	CGLBNoMatching    = int(DirectorDirCounterDIR_C_GLB_NO_MATCHING_BIND)
	CGLBMatched       = int(DirectorDirCounterDIR_C_GLB_MATCHED)
	CICMPTooBig       = int(DirectorDirCounterDIR_C_ICMP_TOO_BIG)
	CTooBigEncap      = int(DirectorDirCounterDIR_C_TOO_BIG_ENCAPSULATED)
	// UDP to a table with QUIC-LB routing: routed by connection ID, or
	// sent by the row, and why.
	CQUICRouted      = int(DirectorDirCounterDIR_C_QUIC_ROUTED)
	CQUICShort       = int(DirectorDirCounterDIR_C_QUIC_FALLBACK_SHORT)
	CQUICCIDLen      = int(DirectorDirCounterDIR_C_QUIC_FALLBACK_CID_LEN)
	CQUICUnroutable  = int(DirectorDirCounterDIR_C_QUIC_FALLBACK_UNROUTABLE)
	CQUICOtherConfig = int(DirectorDirCounterDIR_C_QUIC_FALLBACK_OTHER_CONFIG)
	CQUICUnknownID   = int(DirectorDirCounterDIR_C_QUIC_FALLBACK_UNKNOWN_ID)
	NumCounters      = int(DirectorDirCounterDIR_C_MAX)
)

// QUIC-LB routing (enum dir_quic_limit): the server-ID table's size and
// probes, the longest IDs, the config rotation that is not routed, and the
// bytes read after an ID's first octet.
const (
	QUICSlots      = uint32(DirectorDirQuicLimitDIR_QUIC_SLOTS)
	QUICProbes     = uint32(DirectorDirQuicLimitDIR_QUIC_PROBES)
	QUICMaxSID     = int(DirectorDirQuicLimitDIR_QUIC_MAX_SID)
	QUICMaxCID     = int(DirectorDirQuicLimitDIR_QUIC_MAX_CID)
	QUICUnroutable = uint8(DirectorDirQuicLimitDIR_QUIC_UNROUTABLE)
	QUICRead       = int(DirectorDirQuicLimitDIR_QUIC_READ)
)

// The multipliers of the server-ID hash (enum dir_quic_limit), as 64-bit
// words.
var QUICMult = [...]uint64{
	uint64(DirectorDirQuicLimitDIR_QUIC_K0HI)<<32 | uint64(DirectorDirQuicLimitDIR_QUIC_K0LO),
	uint64(DirectorDirQuicLimitDIR_QUIC_K1HI)<<32 | uint64(DirectorDirQuicLimitDIR_QUIC_K1LO),
}
