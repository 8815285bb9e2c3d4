/* Types shared by the XDP program and the Go control plane. This header is
 * the single source of truth: bpf2go compiles it, abigen (bpf/internal/abigen)
 * generates the Go types in bpf/abi from the object's BTF, and tests check
 * the sizes. Multi-byte fields marked __be are in network
 * byte order; everything else is host order. */
#ifndef DIRECTOR_H
#define DIRECTOR_H

#include <linux/types.h>

#include "gue.h"

/* Sizes and limits: an enum rather than macros, so that they reach Go
 * through the object's BTF (bpf/abi) and Go never restates them. */
enum dir_limit {
	DIR_ROWS = 65536,
	DIR_ROW_MASK = 0xffff,
	DIR_MAX_BACKENDS = 256,
	DIR_MAX_BINDS = 256,
	DIR_MAX_TABLES = 64,   /* counter blocks: tables live at once, with room to spare */
	DIR_MAX_SLOTS = 128,   /* table slots: live, previous and next apply's tables */
	DIR_NAME_LEN = 64,
	DIR_EXACT_SLOTS = 16384, /* exact-bind table entries, a power of two (see below) */
	DIR_EXACT_PROBES = 8,  /* slots from its home an exact entry may be in */
	DIR_GROUP_SLOTS = 32768, /* bind-group table entries, a power of two (see below) */
	DIR_GROUP_PROBES = 8,  /* likewise for a group: half-full tables leave next to none out */
	DIR_GROUP_LENS = 4,    /* prefix lengths per family the group path probes */
	DIR_GROUP_RANGES = 16384, /* port ranges of every group, a power of two */
	DIR_GROUP_SCAN = 8,    /* port ranges of one group the program scans */
	DIR_GROUP_TRIE = 0xff, /* dir_group_table.nlens: this family is the trie's */
	DIR_BIND_GENS = 2,     /* bind generations (see below) */
	DIR_MAX_LINKS = 64,    /* interfaces one director is attached to, for link_mtus */
	DIR_C_SLOTS = 32,      /* room in dir_counters (see below) */
};

/* hash_fields / alt_hash_fields bits: which packet fields feed the flow
 * hash, concatenated in this order. */
enum dir_hash_field {
	DIR_HASH_SRC_ADDR = 1,
	DIR_HASH_DST_ADDR = 2,
	DIR_HASH_SRC_PORT = 4,
	DIR_HASH_DST_PORT = 8,
};

/* The director's own settings, and the live bind generation: map
 * "config", one entry, read once per packet. */
struct dir_config {
	__u8 gateway_mac[6];
	__u8 hash_fields;      /* enum dir_hash_field bits; never 0 */
	__u8 alt_hash_fields;  /* 0: no alternate hash */
	__be32 src_ip;         /* outer IPv4 source */
	__u8 forward_icmp_echo;
	__u8 configured;       /* 0 until the control plane has written the settings */
	/* The largest packet the underlay carries, when smaller than the
	 * interface's MTU (outbound_mtu); 0: the interface's. */
	__u16 outbound_mtu;
	__u32 bind_gen;        /* the live bind generation, 0 or 1 */
	/* The outer IPv4 header's checksum sum over its constant words and
	 * src_ip, unfolded; the loader derives it whenever it writes src_ip
	 * (and at load, for a config an older version wrote). */
	__u32 csum_base;
	/* The IPv6 underlay's: the outer source and the next hop's MAC (the
	 * loader writes gateway_mac when the config gives none of its own). */
	__u8 src_ip6[16];
	__u8 gateway_mac6[6];
	__u8 pad6[2];
};

/* Address families, as GLB numbers them. */
enum dir_family {
	DIR_FAMILY_IPV4 = 1,
	DIR_FAMILY_IPV6 = 2,
};

struct dir_backend {
	__u8 addr[16];   /* IPv4 in the first 4 bytes */
	__u8 family;     /* enum dir_family */
	__u8 state;      /* table.State */
	__u8 healthy;
	__u8 stat;       /* this backend's counter index in backend_traffic */
	/* The rest is the registry's, for userspace; the datapath never reads it. */
	__u16 weight;    /* table.Backend.Weight: 0 when none was given */
	__u8 reserved[2]; /* zero */
	__u8 domain[DIR_NAME_LEN]; /* table.Backend.Domain, NUL-padded; not NUL-terminated when 64 long */
};

struct dir_bind {
	__u8 addr[16];
	__u8 family;
	__u8 prefix_bits;
	__u8 proto;
	__u8 pad;
	__u16 port_start;
	__u16 port_end;
};

/* One row: the counter indices (dir_backend.stat) of its primary and
 * secondary; their addresses are in dir_table.hop_addr. Two bytes, so a
 * table's 65,536 rows take 128 KiB and stay in a core's cache under
 * traffic from many clients (12-byte rows, 768 KiB, cost about 35 ns a
 * packet more in cache misses with 4,096 flows). */
struct dir_row {
	__u8 primary;
	__u8 secondary;
};

/* A whole table is one map value, so a table is replaced by swapping one
 * inner map: a packet sees the old table or the new one, never a mix. The
 * backends and binds are kept so the control plane can read back exactly
 * what the kernel holds. */
struct dir_table {
	__u8 hash_key[16];
	__u32 stats_id;           /* its counters' inner maps in backend_traffic and quic_stats; stable across applies */
	__u16 index;              /* position in the applied config */
	/* The table's history_s: how long a backend that stops being a
	 * row's primary is remembered (struct dir_history); for userspace. */
	__u16 hist_window_s;
	__u8 hop_family;          /* enum dir_family of every backend: the underlay GUE goes over; beside the key, in the line every packet reads */
	/* The most earlier primaries any row lists after its secondary (and
	 * the alternate row's hops): 0, and the packets carry GLB's hop list,
	 * or up to DIR_HIST_HOPS, read from the slot's dir_history. */
	__u8 hist_hops;
	__u8 hist_off;            /* history_hops false: remembered, not sent (userspace's) */
	/* QUIC-LB routing: bit c set when the table routes IDs of config
	 * rotation c (0 to 6) by their server ID, whose settings and IDs are
	 * quic_ids' entry for the slot and c (dir_quic_key); 0 for a table
	 * without it. */
	__u8 quic_configs;
	__u16 balance;            /* table.Table.Balance, the balance factor x1000 (0: none); for userspace, the datapath never reads it */
	__u8 pad[2];
	__u8 name[DIR_NAME_LEN];  /* not NUL-terminated when 64 long */
	__u32 num_backends;
	__u32 num_binds;
	struct dir_backend backends[DIR_MAX_BACKENDS];
	struct dir_bind binds[DIR_MAX_BINDS];
	__be32 hop_addr[DIR_MAX_BACKENDS]; /* by counter index: the IPv4 address, as it goes on the wire */
	__u8 hop_addr6[DIR_MAX_BACKENDS][16]; /* by counter index: the IPv6 address, when hop_family is IPv6 */
	struct dir_row rows[DIR_ROWS];
};

/* Earlier primaries (docs/architecture.md, "History"). A backend that
 * stops being a row's primary is remembered for the table's window, and,
 * while it is up, listed in the row's hops after the secondary, newest
 * first, so that a backend that does not know a connection hands it on
 * down the chain to the one that does. One per table slot that has any
 * (map history), written with the slot's table. */
enum dir_hist_limit {
	DIR_HIST_HOPS = 4,      /* earlier primaries a row's packets list */
	DIR_HIST_RECORD = 6,    /* earlier primaries a row's record holds */
	DIR_HIST_EPOCHS = 255,  /* distinct expiry times a record holds */
	DIR_HIST_NONE = 0xff,   /* dir_hist_row.epoch of an unused entry */
};

struct dir_hist_row {
	/* What packets carry: the counter indices of the hops after the
	 * secondary, newest first; unused ones hold the row's primary. */
	__u8 hop[DIR_HIST_HOPS];
	/* The record, for userspace: each earlier primary's counter index
	 * and the epoch it expires at (DIR_HIST_NONE: unused), newest first. */
	__u8 who[DIR_HIST_RECORD];
	__u8 epoch[DIR_HIST_RECORD];
};

/* A backend the record names that the slot's table no longer has (it was
 * removed within the window): its counter index, address and health. */
struct dir_hist_ghost {
	__u8 addr[16];
	__u8 family;
	__u8 stat;
	__u8 up;
	__u8 pad;
};

struct dir_history {
	__u8 valid;              /* 0: this slot's table has no record */
	__u8 pad[1];
	__u16 nghosts;
	__u16 nepochs;
	__u16 pad2;
	__s64 expires[DIR_HIST_EPOCHS + 1]; /* by epoch: when its entries expire, Unix nanoseconds */
	struct dir_hist_ghost ghosts[DIR_MAX_BACKENDS];
	struct dir_hist_row rows[DIR_ROWS];
};

_Static_assert(DIR_MAX_BACKENDS <= 256, "dir_row holds counter indices in bytes");
/* encap.h's copy16 moves IPv6 addresses out of these in eight-byte loads. */
_Static_assert(__builtin_offsetof(struct dir_table, hop_addr6) % 8 == 0, "hop_addr6 is 8-aligned");
_Static_assert(__builtin_offsetof(struct dir_config, src_ip6) % 8 == 0, "src_ip6 is 8-aligned");

/* Bind lookup is two longest-prefix matches in one LPM trie, so its cost
 * does not grow with the number of binds:
 *   DIR_BIND_ADDR: proto, family, destination address -> group
 *   DIR_BIND_PORT: group, destination port             -> table slot
 * Port ranges are stored as aligned port prefixes; a group holds the
 * effective port map of its address prefix, more specific prefixes taking
 * precedence. Each bind generation has its own trie (see below). */
enum dir_bind_kind {
	DIR_BIND_ADDR = 0,
	DIR_BIND_PORT = 1,
	/* One entry per live table slot, so the control plane can tell from
	 * this one atomically swapped map which tables are live. Never matched
	 * by packets, whose lookups use the other kinds. */
	DIR_BIND_TABLE = 2,
};

struct dir_bind_key {
	__u32 prefixlen;  /* in bits, counted from kind */
	__u8 kind;
	__u8 data[19];    /* ADDR: proto, family, addr[16], 0. PORT: group (be32), port (be16), 0... */
};

struct dir_bind_val {
	__u32 id;         /* ADDR: group. PORT: table slot */
};

/* The fast path: binds to one address and one port (the common case) are
 * also in an open-addressing hash table held in one array map value, so
 * most packets find their table with one cache line or two instead of two
 * trie walks. Its answer is always the trie's: a full-length prefix is the
 * most specific match, and binds of different tables may not overlap at the
 * same prefix. Entries are placed Robin Hood style (loader/exact.go), at
 * most DIR_EXACT_PROBES - 1 slots past their home; one that does not fit
 * is left to the group path. Echo binds are not here: an echo request finds
 * its group, which holds every port. Sized so that the most exact binds a
 * config may have (256 per table, 32 tables) fill it to one half. */
struct dir_exact_key {
	__u8 proto;
	__u8 family;
	__be16 port;
	__u8 addr[16];
};

struct dir_exact_entry {
	struct dir_exact_key key;
	__u32 slot_plus1;  /* 0: empty */
	/* The SipHash state of the table's hash_key after initialization and
	 * the half of the first round that does not involve the message: v0
	 * and v1 after "v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0,
	 * 32)", v2 and v3 as initialized. A packet that finds its bind here
	 * hashes from it at once, without waiting for its table. */
	__u64 hash_state[4];
	__u64 pad;         /* an entry per cache line */
};

struct dir_exact_table {
	struct dir_exact_entry e[DIR_EXACT_SLOTS];
};

/* The home index of a key: its five 32-bit words w0..w4 (read in host
 * order), h = w0*K0 + ... + w4*K4 in 64 bits, then the high half XOR the
 * low half. The 64-bit multipliers are given in halves, as enum values
 * (which reach Go through BTF) hold 32 bits; loader/exact.go computes the
 * same hash, and a test checks it against the program's. */
enum dir_exact_mult {
	DIR_EXACT_K0_HI = 0x9e3779b9, DIR_EXACT_K0_LO = 0x7f4a7c15,
	DIR_EXACT_K1_HI = 0xc2b2ae3d, DIR_EXACT_K1_LO = 0x27d4eb4f,
	DIR_EXACT_K2_HI = 0x165667b1, DIR_EXACT_K2_LO = 0x9e3779f9,
	DIR_EXACT_K3_HI = 0xd6e8feb8, DIR_EXACT_K3_LO = 0x6659fd93,
	DIR_EXACT_K4_HI = 0xff51afd7, DIR_EXACT_K4_LO = 0xed558ccd,
};
#define DIR_EXACT_K(i) ((__u64)DIR_EXACT_K##i##_HI << 32 | DIR_EXACT_K##i##_LO)

/* The group path: every bind, as the trie holds it, in hash tables, for
 * packets the exact table does not answer (prefix binds, port ranges).
 * A group is one (protocol, family, address prefix) with its effective
 * port map: disjoint port ranges, each naming a table slot. The program
 * probes the prefix lengths its family has, longest first (at most
 * DIR_GROUP_LENS, else the family is left to the trie), hashing the key
 * (proto | family << 8 | plen << 16, then the masked address words) as
 * the exact table does; the first group found decides, as the trie's
 * longest match does, and its port is looked for among its ranges (a
 * group with more than DIR_GROUP_SCAN is left to the trie). So the cost is
 * a few cache lines whatever the number of binds. Each slot's SipHash
 * state is kept here too, as exact entries keep theirs. Groups are placed
 * as exact entries are. A group that does not fit leaves the probes of its
 * home all full, and a probe that finds them full without its key asks
 * the trie: only that group's packets, not the family's, take the slow
 * path. At the limits (8,192 binds to as many addresses, and their echo
 * groups) the table is half full. */
struct dir_group_key {
	__u8 proto;
	__u8 family;
	__u8 plen;
	__u8 pad;
	__u8 addr[16];     /* masked to plen */
};

struct dir_port_range {
	__u16 lo, hi;      /* inclusive, host order */
	__u32 slot;        /* table slot */
};

/* One cache line: a group whose ports all go to one range (the common
 * case) is answered from it alone, its table's hash state included. */
struct dir_group_entry {
	struct dir_group_key key;
	__u8 count;        /* ranges; 0: an empty entry */
	__u8 trie;         /* 1: more ranges than the program scans: ask the trie */
	__u16 first;       /* its other ranges, after range0, in dir_group_table.r */
	struct dir_port_range range0; /* its widest range */
	__u64 state[4];    /* range0's table's SipHash state, as in dir_exact_entry */
};

/* A prefix length the program probes, with its address mask (network
 * order, per 32-bit word) ready. */
struct dir_group_len {
	__u8 plen;
	__u8 pad[3];
	__u32 mask[4];
};

struct dir_group_table {
	__u8 ready;        /* 0: never written (a program newer than the binds): ask the trie */
	__u8 nlens[2];     /* per family (0: IPv4, 1: IPv6): prefix lengths, or DIR_GROUP_TRIE */
	__u8 pad[5];
	struct dir_group_len lens[2][DIR_GROUP_LENS]; /* longest first */
	__u64 state[DIR_MAX_SLOTS][4]; /* each slot's table's SipHash state */
	struct dir_group_entry e[DIR_GROUP_SLOTS];
	struct dir_port_range r[DIR_GROUP_RANGES];
};

/* Bind maps come in two generations, each a trie, an exact table and a
 * group table (binds[gen], bind_exact[gen], bind_groups[gen]). An apply writes its tables into slots
 * neither generation references, fills the inactive generation, then flips
 * dir_config.bind_gen: one aligned 4-byte store moves every packet to the
 * new binds, and so to the new tables, at once. */

/* Global counters: one per-CPU array entry of these. Those every steered
 * packet touches come first, in one cache line. Their names, lower-cased
 * without DIR_C_, are the counters' names everywhere (stats, replay,
 * metrics): Go reads them from the object's BTF. */
enum dir_counter {
	DIR_C_PROCESSED = 0,
	DIR_C_MATCHED,
	DIR_C_ENCAPSULATED,
	DIR_C_ENCAPSULATED_BYTES,
	DIR_C_BIND_FAST,          /* of matched: found by the exact fast path */
	DIR_C_PASS_NOT_IP,        /* not IPv4 or IPv6 */
	DIR_C_PASS_VLAN,          /* QinQ or more than one tag */
	DIR_C_PASS_MALFORMED,     /* truncated or inconsistent headers */
	DIR_C_PASS_FRAGMENT,
	DIR_C_PASS_IPV6_EXT,      /* too many IPv6 extension headers */
	DIR_C_PASS_PROTO,         /* not TCP, UDP or a steered ICMP type */
	DIR_C_PASS_ICMP_ECHO_OFF, /* echo to a VIP, forwarding switched off */
	DIR_C_PASS_NO_BIND,
	DIR_C_PASS_HEADERS_SPLIT, /* a multi-buffer frame whose headers run past its first buffer */
	DIR_C_PASS_TOO_BIG,       /* the encapsulated packet would be over 65,535 bytes */
	DIR_C_ERROR_NO_CONFIG,
	DIR_C_ERROR_NO_TABLE,
	DIR_C_ERROR_ADJUST_HEAD,
	DIR_C_ERROR_BOUNDS,
	DIR_C_BIND_GROUP,         /* of matched: found by the group path (prefixes, port ranges) */
	/* Of the packets passed for a DIR_C_PASS_ reason, what GLB's director
	 * would have counted them as (its statsd results): UnknownFormat when
	 * its parser cannot read the frame, Matched when what it reads is
	 * bound (GLB would have steered it), NoMatchingBind otherwise. */
	DIR_C_GLB_UNKNOWN_FORMAT,
	DIR_C_GLB_NO_MATCHING_BIND,
	DIR_C_GLB_MATCHED,
	/* Packets too big for the underlay once encapsulated (toobig.h):
	 * answered with ICMP fragmentation-needed or ICMPv6 packet-too-big,
	 * or (IPv4 without DF, ICMP errors, IPv6 already at 1,280 bytes)
	 * encapsulated all the same, as GLB does. */
	DIR_C_ICMP_TOO_BIG,
	DIR_C_TOO_BIG_ENCAPSULATED,
	/* UDP to a table with QUIC-LB routing (quic.h): sent to the backend
	 * its destination connection ID names; or sent by the row, and why. */
	DIR_C_QUIC_ROUTED,
	DIR_C_QUIC_FALLBACK_SHORT,        /* the payload is too short for the ID the table reads */
	DIR_C_QUIC_FALLBACK_CID_LEN,      /* a long header's ID is over 20 bytes or has no room for a server ID */
	DIR_C_QUIC_FALLBACK_UNROUTABLE,   /* config rotation 0b111: the server asks for 4-tuple routing */
	DIR_C_QUIC_FALLBACK_OTHER_CONFIG, /* config rotation bits of another config */
	DIR_C_QUIC_FALLBACK_UNKNOWN_ID,   /* no serving backend of the table has that server ID */
	/* Of DIR_C_QUIC_ROUTED: ICMP errors sent to the server that the
	 * connection ID of the packet they quote names. */
	DIR_C_QUIC_ICMP_ROUTED,
	DIR_C_MAX,
};

/* DIR_C_SLOTS leaves room for counters to come, so that adding one does
 * not change the map's layout (which makes 'director load' refuse the
 * pinned maps). */
_Static_assert(DIR_C_MAX <= DIR_C_SLOTS, "dir_counters has room for every counter");

struct dir_counters {
	__u64 c[DIR_C_SLOTS];
};

struct dir_traffic {
	__u64 packets;
	__u64 bytes;
};

/* QUIC-LB routing (draft-ietf-quic-load-balancers; docs/wire.md
 * "QUIC-LB"). A table whose config has a "quic" block names each backend's
 * server ID in each of its configs. A UDP packet to it whose destination
 * connection ID carries the config rotation bits of one of the table's
 * configs and, in that config, the server ID of a backend that is serving
 * (active, filling or draining, and healthy) goes to that backend, whatever
 * its row says; any other follows the row. Each config of each table slot
 * has an entry in map quic_ids (key dir_quic_key): the config's lengths,
 * and the serving backends' IDs in an open-addressing table, written with
 * the slot's table: a packet sees the configs of the table it reads. The
 * key is the server ID as two little-endian words, w0 its first eight
 * bytes and w1 the rest (zero-padded); its home is (w0*K0 + w1*K1) >> 32,
 * masked, and an entry lies at most DIR_QUIC_PROBES - 1 slots past it
 * (placed by loader/mapimage/quic.go, which a test checks against the
 * program). */
enum dir_quic_limit {
	DIR_QUIC_SLOTS = 512,    /* a power of two: 256 backends fill it to one half */
	DIR_QUIC_PROBES = 8,
	DIR_QUIC_MAX_SID = 15,
	DIR_QUIC_MAX_CID = 20,   /* the longest connection ID QUIC v1 allows */
	DIR_QUIC_UNROUTABLE = 7, /* config rotation 0b111 */
	DIR_QUIC_CONFIGS = 8,    /* config rotations, 0b111 included: quic_ids' keys per slot */
	DIR_QUIC_READ = 16,      /* bytes the program reads after the ID's first octet */
	DIR_QUIC_K0_HI = 0x9e3779b9, DIR_QUIC_K0_LO = 0x7f4a7c15,
	DIR_QUIC_K1_HI = 0xc2b2ae3d, DIR_QUIC_K1_LO = 0x27d4eb4f,
};
#define DIR_QUIC_K(i) ((__u64)DIR_QUIC_K##i##_HI << 32 | DIR_QUIC_K##i##_LO)

struct dir_quic_entry {
	__u8 sid[DIR_QUIC_MAX_SID]; /* zero-padded */
	__u8 stat_plus1;            /* the backend's counter index + 1; 0: empty */
};

/* QUIC-LB's counters per table and config (map quic_stats): in the
 * table's inner map (at its stats_id), at the config rotation bits of the
 * packet's connection ID (0 to 7), or DIR_QUIC_NO_ID where no ID was read (a payload
 * too short, a long header's ID length out of range), the packets counted
 * under each of DIR_C_QUIC_ROUTED to DIR_C_QUIC_ICMP_ROUTED, in that order
 * from c[0]. */
enum dir_quic_stat_limit {
	DIR_QUIC_STAT_KEYS = 16, /* per table: 8 config rotations, no ID, room to spare */
	DIR_QUIC_NO_ID = 8,
	DIR_QUIC_STAT_COUNTERS = 8,
};

struct dir_quic_stats {
	__u64 c[DIR_QUIC_STAT_COUNTERS];
};
_Static_assert(DIR_C_QUIC_ICMP_ROUTED - DIR_C_QUIC_ROUTED < DIR_QUIC_STAT_COUNTERS, "dir_quic_stats has room for every QUIC counter");

struct dir_quic_table {
	__u8 sid_len;  /* the server ID's length, 1 to DIR_QUIC_MAX_SID */
	__u8 cid_len;  /* a short header's connection-ID length: 1 + server ID + nonce */
	__u8 enc;      /* 1: the server ID and nonce are encrypted together with quic_keys' key of the same dir_quic_key */
	__u8 pad[13];
	struct dir_quic_entry e[DIR_QUIC_SLOTS]; /* the serving backends' IDs */
	/* Every backend's ID by its position in dir_table.backends, for
	 * userspace: the datapath never reads it. */
	struct dir_quic_entry ids[DIR_MAX_BACKENDS];
};

/* What the loader records of the table in each slot, which the datapath
 * never reads: the table's fingerprint (SHA-256 of what it holds) and its
 * input digest (HMAC-SHA-256 keyed by the table's seed over what decides
 * it and the fingerprint; table.InputDigest), so that a config's table
 * whose inputs match is taken from the kernel instead of built again. */
struct dir_registry {
	__u8 fingerprint[32];
	__u8 digest[32]; /* all zero: none recorded */
};

#endif
