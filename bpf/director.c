//go:build ignore

/* director: GLB-compatible XDP load-balancer director.
 *
 * For each packet: parse Ethernet (one optional 802.1Q tag), IPv4 or IPv6,
 * then TCP/UDP ports, or the flow quoted by an ICMP error, or an ICMP echo
 * request. Look the destination up in the binds to find a table, hash the
 * flow with the table's key, read one row, and encapsulate the packet in
 * GUE with GLB's private hop list to the row's primary: XDP_TX. Anything
 * else is passed to the stack untouched and counted by reason. */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "director.h"
#include "csum.h"

char LICENSE[] SEC("license") = "GPL";

/* Anchor the shared types so bpf2go can generate them. */
const struct dir_config *unused_config __attribute__((unused));
const struct dir_table *unused_table __attribute__((unused));
const struct dir_bind_key *unused_bind_key __attribute__((unused));
const struct dir_bind_val *unused_bind_val __attribute__((unused));
const struct dir_counters *unused_counters __attribute__((unused));
const struct dir_traffic *unused_traffic __attribute__((unused));
const enum dir_counter *unused_counter __attribute__((unused));
const enum dir_hash_field *unused_hash_field __attribute__((unused));
const enum dir_family *unused_family __attribute__((unused));
const enum dir_bind_kind *unused_bind_kind __attribute__((unused));
const struct dir_exact_key *unused_exact_key __attribute__((unused));
const struct dir_exact_table *unused_exact_table __attribute__((unused));
const struct dir_group_table *unused_group_table __attribute__((unused));
const enum dir_limit *unused_limit __attribute__((unused));
const enum dir_exact_mult *unused_exact_mult __attribute__((unused));
const enum gue_const *unused_gue_const __attribute__((unused));
const struct glb_encap *unused_glb_encap __attribute__((unused));
const enum xdp_action *unused_xdp_action __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_config);
} config SEC(".maps");

/* Bind maps, two generations of each. The inner maps are created once, at
 * load, and only their contents change afterwards: replacing an entry of a
 * map of maps makes the kernel wait for an RCU grace period. */
struct bind_trie {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dir_bind_key);
	__type(value, struct dir_bind_val);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DIR_BIND_GENS);
	__type(key, __u32);
	__array(values, struct bind_trie);
} binds SEC(".maps");

/* The exact tables of both generations are values of one plain array:
 * a generation is only written while it is inactive, so it needs no map
 * of its own to be swapped in, and packets save an indirection. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_BIND_GENS);
	__type(key, __u32);
	__type(value, struct dir_exact_table);
} bind_exact SEC(".maps");

/* The group tables of both generations, like bind_exact. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_BIND_GENS);
	__type(key, __u32);
	__type(value, struct dir_group_table);
} bind_groups SEC(".maps");

struct table_slot {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_table);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DIR_MAX_SLOTS);
	__type(key, __u32);
	__array(values, struct table_slot);
} tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_counters);
} counters SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DIR_MAX_TABLES * DIR_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct dir_traffic);
} backend_traffic SEC(".maps");

#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88a8
#define IPPROTO_ICMPV6_ 58
#define ICMP_DEST_UNREACH_ 3
#define ICMP_ECHO_ 8
#define ICMPV6_PKT_TOOBIG_ 2
#define ICMPV6_ECHO_REQUEST_ 128

/* The flow a packet belongs to, seen from the client. */
struct flow {
	__u8 client[16];   /* source address of the client's packets */
	__u8 vip[16];      /* destination: the bind address */
	__be16 client_port;
	__be16 vip_port;
	__u8 proto;        /* bind protocol: TCP, UDP, or ICMP(v6) for echo */
	__u8 family;
};

/* ---- SipHash-2-4 ---- */

#define ROTL(x, b) (__u64)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                   \
	do {                                                       \
		v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;             \
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;             \
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
	} while (0)

/* sip_finish is SipHash-2-4's finalization, after the last block. */
static __always_inline __u64 sip_finish(__u64 v0, __u64 v1, __u64 v2, __u64 v3)
{
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* The message: at most source and destination IPv6 addresses and two
 * ports, 36 bytes, zero-padded to whole words. */
struct hashbuf {
	__u64 w[5];
};

static __always_inline __u64 siphash(const __u8 key[16], const struct hashbuf *m, __u32 len)
{
	__u64 k0 = *(const __u64 *)key, k1 = *(const __u64 *)(key + 8);
	__u64 v0 = k0 ^ 0x736f6d6570736575ULL;
	__u64 v1 = k1 ^ 0x646f72616e646f6dULL;
	__u64 v2 = k0 ^ 0x6c7967656e657261ULL;
	__u64 v3 = k1 ^ 0x7465646279746573ULL;
	__u32 full = len / 8; /* whole words before the final block */

	/* A bounded loop rather than an unrolled one: this is the hot path's
	 * biggest piece of code, and instruction cache is what it costs. */
	for (__u32 i = 0; i < 4; i++) {
		if (i >= full)
			break;
		__u64 w = m->w[i];
		v3 ^= w;
		SIPROUND;
		SIPROUND;
		v0 ^= w;
	}
	/* The final block: the tail bytes (the padding is zero) and the length. */
	__u64 w = ((__u64)len << 56);
	if (full < 5)
		w |= m->w[full];
	v3 ^= w;
	SIPROUND;
	SIPROUND;
	v0 ^= w;
	return sip_finish(v0, v1, v2, v3);
}

/* flow_hash is GLB's: SipHash over the enabled fields, concatenated in
 * order: source address, destination address, source port, destination
 * port, all in network byte order. Inlined: as a subprogram it would take
 * the flow's address, and the flow would live on the stack for every
 * packet, costing store-to-load round trips on the way to the bind
 * lookup (about 4 ns measured), more than the larger code does. */
static __always_inline __u64 flow_hash(const __u8 *key, const struct flow *f, __u32 fields)
{
	struct hashbuf m = {};
	__u8 *b = (__u8 *)&m;
	__u32 off = 0;
	int v4 = f->family == DIR_FAMILY_IPV4;

	if (fields & DIR_HASH_SRC_ADDR) {
		if (v4) {
			__builtin_memcpy(b, f->client, 4);
			off = 4;
		} else {
			__builtin_memcpy(b, f->client, 16);
			off = 16;
		}
	}
	if (fields & DIR_HASH_DST_ADDR) {
		if (off > 16)
			return 0;
		if (v4) {
			__builtin_memcpy(b + off, f->vip, 4);
			off += 4;
		} else {
			__builtin_memcpy(b + off, f->vip, 16);
			off += 16;
		}
	}
	if (fields & DIR_HASH_SRC_PORT) {
		if (off > 32)
			return 0;
		__builtin_memcpy(b + off, &f->client_port, 2);
		off += 2;
	}
	if (fields & DIR_HASH_DST_PORT) {
		if (off > 34)
			return 0;
		__builtin_memcpy(b + off, &f->vip_port, 2);
		off += 2;
	}
	return siphash(key, &m, off);
}

/* The default hash, source address only: for an IPv4 client a single
 * SipHash block, for an IPv6 one two and the length block, inlined, from
 * the state the bind's entry holds (dir_exact_entry.hash_state) or else
 * from the table's key. Everything else goes through flow_hash. */
static __always_inline __u64 hash_flow(const __u8 *key, const __u64 *state, const struct flow *f, __u32 fields)
{
	if (fields != DIR_HASH_SRC_ADDR)
		return flow_hash(key, f, fields);
	int v4 = f->family == DIR_FAMILY_IPV4;
	__u64 v0, v1, v2, v3, w, w2 = 0;
	if (v4) {
		__u32 a;
		__builtin_memcpy(&a, f->client, 4);
		w = (__u64)a | (4ULL << 56);
	} else {
		__builtin_memcpy(&w, f->client, 8);
		__builtin_memcpy(&w2, f->client + 8, 8);
	}
	/* The first block. */
	if (state) {
		v0 = state[0];
		v1 = state[1];
		v2 = state[2];
		v3 = state[3] ^ w;
		/* The rest of the first round. */
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);
	} else {
		__u64 k0 = *(const __u64 *)key, k1 = *(const __u64 *)(key + 8);
		v0 = k0 ^ 0x736f6d6570736575ULL;
		v1 = k1 ^ 0x646f72616e646f6dULL;
		v2 = k0 ^ 0x6c7967656e657261ULL;
		v3 = k1 ^ 0x7465646279746573ULL;
		v3 ^= w;
		SIPROUND;
	}
	SIPROUND;
	v0 ^= w;
	if (!v4) {
		/* The second half of the address, then the length block. */
		v3 ^= w2;
		SIPROUND;
		SIPROUND;
		v0 ^= w2;
		w = 16ULL << 56;
		v3 ^= w;
		SIPROUND;
		SIPROUND;
		v0 ^= w;
	}
	return sip_finish(v0, v1, v2, v3);
}

/* ---- parsing ----
 *
 * Every read is checked against both the end of the IP packet (what the
 * header says) and the end of the frame's first buffer (what the verifier
 * tracks, end). A multi-buffer frame (xdp.frags: jumbo MTUs, multi-buffer
 * NIC rings) has an IP packet that runs past its first buffer; its headers
 * must lie in that buffer. A read that fails is a malformed packet if it
 * runs past the IP packet, and otherwise one whose headers were split. */
#define OUTSIDE(p, n, ip_end, end) ((void *)(p) + (n) > (ip_end) || (void *)(p) + (n) > (end))
#define BAD_READ(p, n, ip_end) ((void *)(p) + (n) > (ip_end) ? DIR_C_PASS_MALFORMED : DIR_C_PASS_HEADERS_SPLIT)

/* ip_fits checks that an IP packet of tot bytes, after an L2 header of
 * l2len, lies within the frame. Only a packet that runs past the first
 * buffer costs the helper call that measures the whole frame. */
static __always_inline int ip_fits(struct xdp_md *ctx, void *ip, void *end, __u32 l2len, __u32 tot)
{
	if (ip + tot <= end)
		return 1;
	return l2len + tot <= bpf_xdp_get_buff_len(ctx);
}

static __always_inline int ports(void *p, void *ip_end, void *end, struct flow *f, int reversed)
{
	__be16 *pp = p;
	if (OUTSIDE(pp, 4, ip_end, end))
		return BAD_READ(pp, 4, ip_end);
	if (reversed) {
		f->vip_port = pp[0];
		f->client_port = pp[1];
	} else {
		f->client_port = pp[0];
		f->vip_port = pp[1];
	}
	return 0;
}

/* parse_l4 fills f from a TCP or UDP header at l4, within the IP packet
 * ending at ip_end. Returns 0 or a counter to pass with. */
static __always_inline int parse_l4(__u8 proto, void *l4, void *ip_end, void *end, struct flow *f)
{
	__u32 need = proto == IPPROTO_TCP ? 20 : 8;
	if (OUTSIDE(l4, need, ip_end, end))
		return BAD_READ(l4, need, ip_end);
	f->proto = proto;
	return ports(l4, ip_end, end, f, 0);
}

static __always_inline int parse_ipv4(struct xdp_md *ctx, void *ip, void *end, __u32 l2len, struct flow *f, __u32 *ip_len,
				      __u8 *icmp_echo)
{
	struct iphdr *iph = ip;
	if ((void *)(iph + 1) > end)
		return DIR_C_PASS_MALFORMED;
	__u32 hl = iph->ihl * 4;
	if (iph->version != 4 || hl < 20)
		return DIR_C_PASS_MALFORMED;
	__u32 tot = bounded16(bpf_ntohs(iph->tot_len));
	if (tot < hl || !ip_fits(ctx, ip, end, l2len, tot))
		return DIR_C_PASS_MALFORMED;
	void *ip_end = ip + tot;
	if (iph->frag_off & bpf_htons(0x3fff))
		return DIR_C_PASS_FRAGMENT;
	*ip_len = tot;
	f->family = DIR_FAMILY_IPV4;
	__builtin_memcpy(f->client, &iph->saddr, 4);
	__builtin_memcpy(f->vip, &iph->daddr, 4);

	void *l4 = ip + hl;
	if (l4 > ip_end)
		return DIR_C_PASS_MALFORMED;
	if (iph->protocol == IPPROTO_TCP || iph->protocol == IPPROTO_UDP)
		return parse_l4(iph->protocol, l4, ip_end, end, f);
	if (iph->protocol != IPPROTO_ICMP)
		return DIR_C_PASS_PROTO;

	__u8 *icmp = l4;
	if (OUTSIDE(icmp, 8, ip_end, end))
		return BAD_READ(icmp, 8, ip_end);
	if (icmp[0] == ICMP_ECHO_) {
		f->proto = IPPROTO_ICMP;
		*icmp_echo = 1;
		return 0;
	}
	if (icmp[0] != ICMP_DEST_UNREACH_)
		return DIR_C_PASS_PROTO;

	/* The quoted packet went from the VIP to the client: steer by the
	 * flow reversed. */
	struct iphdr *q = (void *)(icmp + 8);
	if (OUTSIDE(q, sizeof(*q), ip_end, end))
		return BAD_READ(q, sizeof(*q), ip_end);
	__u32 qhl = q->ihl * 4;
	if (q->version != 4 || qhl < 20)
		return DIR_C_PASS_MALFORMED;
	if (q->protocol != IPPROTO_TCP && q->protocol != IPPROTO_UDP)
		return DIR_C_PASS_PROTO;
	__builtin_memcpy(f->vip, &q->saddr, 4);
	__builtin_memcpy(f->client, &q->daddr, 4);
	f->proto = q->protocol;
	return ports((void *)q + qhl, ip_end, end, f, 1);
}

static __always_inline int ipv6_ext(__u8 nh)
{
	return nh == 0 || nh == 43 || nh == 60; /* hop-by-hop, routing, destination options */
}

static __always_inline int parse_ipv6(struct xdp_md *ctx, void *ip, void *end, __u32 l2len, struct flow *f, __u32 *ip_len,
				      __u8 *icmp_echo)
{
	struct ipv6hdr *ip6 = ip;
	if ((void *)(ip6 + 1) > end)
		return DIR_C_PASS_MALFORMED;
	if (ip6->version != 6)
		return DIR_C_PASS_MALFORMED;
	__u32 tot = 40 + bounded16(bpf_ntohs(ip6->payload_len));
	if (!ip_fits(ctx, ip, end, l2len, tot))
		return DIR_C_PASS_MALFORMED;
	void *ip_end = ip + tot;
	*ip_len = tot;
	f->family = DIR_FAMILY_IPV6;
	__builtin_memcpy(f->client, &ip6->saddr, 16);
	__builtin_memcpy(f->vip, &ip6->daddr, 16);

	__u8 nh = ip6->nexthdr;
	void *p = ip + 40;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (!ipv6_ext(nh))
			break;
		__u8 *h = p;
		if (OUTSIDE(h, 2, ip_end, end))
			return BAD_READ(h, 2, ip_end);
		nh = h[0];
		p += (h[1] + 1) * 8;
	}
	if (ipv6_ext(nh))
		return DIR_C_PASS_IPV6_EXT;
	if (nh == 44)
		return DIR_C_PASS_FRAGMENT;
	if (p > ip_end)
		return DIR_C_PASS_MALFORMED;
	if (nh == IPPROTO_TCP || nh == IPPROTO_UDP)
		return parse_l4(nh, p, ip_end, end, f);
	if (nh != IPPROTO_ICMPV6_)
		return DIR_C_PASS_PROTO;

	__u8 *icmp = p;
	if (OUTSIDE(icmp, 8, ip_end, end))
		return BAD_READ(icmp, 8, ip_end);
	if (icmp[0] == ICMPV6_ECHO_REQUEST_) {
		f->proto = IPPROTO_ICMPV6_;
		*icmp_echo = 1;
		return 0;
	}
	if (icmp[0] != ICMPV6_PKT_TOOBIG_)
		return DIR_C_PASS_PROTO;
	struct ipv6hdr *q = (void *)(icmp + 8);
	if (OUTSIDE(q, sizeof(*q), ip_end, end))
		return BAD_READ(q, sizeof(*q), ip_end);
	if (q->version != 6)
		return DIR_C_PASS_MALFORMED;
	if (q->nexthdr != IPPROTO_TCP && q->nexthdr != IPPROTO_UDP)
		return DIR_C_PASS_PROTO;
	__builtin_memcpy(f->vip, &q->saddr, 16);
	__builtin_memcpy(f->client, &q->daddr, 16);
	f->proto = q->nexthdr;
	return ports(q + 1, ip_end, end, f, 1);
}

/* exact_hash: see director.h. Words are read in host order, as the Go side
 * does. The five products are independent, so the hash costs about one
 * multiplication's latency rather than five in a row. */
static __always_inline __u32 exact_hash(__u32 w0, __u32 w1, __u32 w2, __u32 w3, __u32 w4)
{
	__u64 h = (__u64)w0 * DIR_EXACT_K(0) + (__u64)w1 * DIR_EXACT_K(1) + (__u64)w2 * DIR_EXACT_K(2) +
		  (__u64)w3 * DIR_EXACT_K(3) + (__u64)w4 * DIR_EXACT_K(4);
	return (__u32)(h >> 32) ^ (__u32)h;
}

/* probe_exact looks for the key w0..w4 from home index h. Only the first
 * nwords words are compared: the caller passes a constant, 2 for IPv4
 * (the family is in the first word, and an IPv4 key's last three are
 * zero, so two words identify it) or 5. */
static __always_inline int probe_exact(struct dir_exact_table *et, __u32 h, __u32 w0, __u32 w1, __u32 w2, __u32 w3,
				       __u32 w4, int nwords, struct dir_counters *c, const __u64 **state)
{
#pragma unroll
	for (int i = 0; i < DIR_EXACT_PROBES; i++) {
		struct dir_exact_entry *e = &et->e[(h + i) & (DIR_EXACT_SLOTS - 1)];
		if (!e->slot_plus1)
			return -1;
		__u32 *ew = (__u32 *)&e->key;
		if (ew[0] == w0 && ew[1] == w1 && (nwords == 2 || (ew[2] == w2 && ew[3] == w3 && ew[4] == w4))) {
			c->c[DIR_C_BIND_FAST]++;
			*state = e->hash_state;
			return e->slot_plus1 - 1;
		}
	}
	return -1;
}

/* lookup_exact returns the table slot for a flow, or -1, and the hash
 * state of its table. The key's words are built in registers: written to
 * the stack as bytes and read back as words, they would miss store
 * forwarding. */
static __always_inline int lookup_exact(struct dir_exact_table *et, const struct flow *f, struct dir_counters *c,
					const __u64 **state)
{
	__u32 w0 = f->proto | (__u32)f->family << 8 | (__u32)f->vip_port << 16;
	const __u32 *a = (const __u32 *)f->vip;
	if (f->family == DIR_FAMILY_IPV4)
		/* The other words are zero and add nothing to the hash. */
		return probe_exact(et, exact_hash(w0, a[0], 0, 0, 0), w0, a[0], 0, 0, 0, 2, c, state);
	return probe_exact(et, exact_hash(w0, a[0], a[1], a[2], a[3]), w0, a[0], a[1], a[2], a[3], 5, c, state);
}

/* The group path is one global function: the verifier checks it once, on
 * its own, rather than at every use, which keeps the program's load time
 * (and replay's start-up) what it was before it. It returns -1 for no
 * bind, -2 when the trie must answer, or where the match is: GROUP_IN_ENTRY
 * | the entry (its range0, and its own hash state), or else the index of
 * the range in dir_group_table.r (and the state is its slot's). Where, not
 * what: the caller's hash state then waits for the probe's hash alone,
 * not for a load of the slot as well. */
#define GROUP_IN_ENTRY (1u << 16)
_Static_assert(DIR_GROUP_SLOTS <= GROUP_IN_ENTRY && DIR_GROUP_RANGES <= GROUP_IN_ENTRY, "GROUP_IN_ENTRY is no index");

static __always_inline int group_match(struct dir_group_entry *e, __u32 idx, __u16 port, struct dir_group_table *gt)
{
	if (port >= e->range0.lo && port <= e->range0.hi)
		return GROUP_IN_ENTRY | idx;
	__u32 first = e->first, more = e->count - 1;
	/* A bounded loop, which the verifier follows. */
	for (__u32 j = 0; j < DIR_GROUP_SCAN - 1 && j < more; j++) {
		__u32 ri = (first + j) & (DIR_GROUP_RANGES - 1);
		struct dir_port_range *r = &gt->r[ri];
		if (port >= r->lo && port <= r->hi)
			return ri;
	}
	/* The longest prefix decides: no range, no bind. */
	return -1;
}

/* probe_group looks for the group of key w0..w4: its answer, -3 when
 * there is none, or -2 (ask the trie) when its probes are all full: a group
 * that did not fit may be the key's. v4, a constant at each use, says an
 * IPv4 key: its last three words are zero, so they add nothing to the hash
 * and need no comparing (the family is in w0), as in probe_exact. */
static __always_inline int probe_group(struct dir_group_table *gt, __u32 w0, __u32 m0, __u32 m1, __u32 m2, __u32 m3,
				       __u16 port, int v4)
{
	__u32 h = v4 ? exact_hash(w0, m0, 0, 0, 0) : exact_hash(w0, m0, m1, m2, m3);
#pragma unroll
	for (int i = 0; i < DIR_GROUP_PROBES; i++) {
		__u32 idx = (h + i) & (DIR_GROUP_SLOTS - 1);
		struct dir_group_entry *e = &gt->e[idx];
		if (!e->count)
			return -3;
		__u32 *ew = (__u32 *)&e->key;
		if (ew[0] == w0 && ew[1] == m0 && (v4 || (ew[2] == m1 && ew[3] == m2 && ew[4] == m3)))
			return e->trie ? -2 : group_match(e, idx, port, gt);
	}
	return -2;
}

/* probe_len probes the group of the flow's address at the family's li-th
 * prefix length; v4 (a constant) says the family is IPv4. */
static __always_inline int probe_len(struct dir_group_table *gt, const struct flow *f, int v4, int li)
{
	const __u32 *a = (const __u32 *)f->vip;
	__u16 port = bpf_ntohs(f->vip_port);
	struct dir_group_len *l = &gt->lens[v4 ? 0 : 1][li];
	__u32 w0 = f->proto | (__u32)f->family << 8 | (__u32)l->plen << 16;
	if (v4)
		return probe_group(gt, w0, a[0] & l->mask[0], 0, 0, 0, port, 1);
	return probe_group(gt, w0, a[0] & l->mask[0], a[1] & l->mask[1], a[2] & l->mask[2], a[3] & l->mask[3], port, 0);
}

/* lookup_lens tries the family's n prefix lengths, longest first, by hand:
 * clang will not unroll a loop around the probes' own unrolled loops. */
static __always_inline int lookup_lens(struct dir_group_table *gt, const struct flow *f, int v4, __u32 n)
{
	int r;
	_Static_assert(DIR_GROUP_LENS == 4, "one try per length");
	if (n == 0 || (r = probe_len(gt, f, v4, 0)) != -3)
		return n == 0 ? -1 : r;
	if (n == 1 || (r = probe_len(gt, f, v4, 1)) != -3)
		return n == 1 ? -1 : r;
	if (n == 2 || (r = probe_len(gt, f, v4, 2)) != -3)
		return n == 2 ? -1 : r;
	if (n == 3 || (r = probe_len(gt, f, v4, 3)) != -3)
		return n == 3 ? -1 : r;
	return -1;
}

__noinline int dir_group_lookup(struct dir_group_table *gt, const struct flow *f)
{
	if (!gt || !f || !gt->ready)
		return -2;
	int fi = f->family == DIR_FAMILY_IPV6;
	__u32 n = gt->nlens[fi];
	if (n == DIR_GROUP_TRIE)
		return -2;
	if (!fi)
		return lookup_lens(gt, f, 1, n);
	return lookup_lens(gt, f, 0, n);
}

/* lookup_groups returns the table slot for a flow and its hash state, -1
 * for no bind, or -2 when the trie must answer. */
static __always_inline int lookup_groups(struct dir_group_table *gt, const struct flow *f, struct dir_counters *c,
					 const __u64 **state)
{
	int r = dir_group_lookup(gt, f);
	if (r < 0)
		return r;
	__u32 slot;
	if (r & GROUP_IN_ENTRY) {
		struct dir_group_entry *e = &gt->e[r & (DIR_GROUP_SLOTS - 1)];
		slot = e->range0.slot & (DIR_MAX_SLOTS - 1);
		*state = e->state;
	} else {
		slot = gt->r[r & (DIR_GROUP_RANGES - 1)].slot & (DIR_MAX_SLOTS - 1);
		*state = gt->state[slot];
	}
	c->c[DIR_C_BIND_GROUP]++;
	return slot;
}

static __always_inline int lookup_trie(void *trie, const struct flow *f)
{
	struct dir_bind_key k = {};
	k.prefixlen = 8 * (1 + sizeof(k.data));
	k.kind = DIR_BIND_ADDR;
	k.data[0] = f->proto;
	k.data[1] = f->family;
	__builtin_memcpy(&k.data[2], f->vip, 16);
	struct dir_bind_val *g = bpf_map_lookup_elem(trie, &k);
	if (!g)
		return -1;
	__be32 group = bpf_htonl(g->id);
	__builtin_memset(&k.data, 0, sizeof(k.data));
	k.kind = DIR_BIND_PORT;
	__builtin_memcpy(&k.data[0], &group, 4);
	__builtin_memcpy(&k.data[4], &f->vip_port, 2);
	struct dir_bind_val *slot = bpf_map_lookup_elem(trie, &k);
	if (!slot)
		return -1;
	return slot->id;
}

/* lookup_bind returns the table slot for a flow, or -1. When the exact
 * table answers, *state is its table's hash state; else it is untouched. */
static __always_inline int lookup_bind(const struct flow *f, struct dir_counters *c, __u32 gen, const __u64 **state)
{
	gen &= DIR_BIND_GENS - 1;
	struct dir_exact_table *et = bpf_map_lookup_elem(&bind_exact, &gen);
	if (et) {
		int slot = lookup_exact(et, f, c, state);
		if (slot >= 0)
			return slot;
	}
	struct dir_group_table *gt = bpf_map_lookup_elem(&bind_groups, &gen);
	if (gt) {
		int slot = lookup_groups(gt, f, c, state);
		if (slot != -2)
			return slot;
	}
	void *trie = bpf_map_lookup_elem(&binds, &gen);
	if (!trie)
		return -1;
	return lookup_trie(trie, f);
}

_Static_assert(sizeof(struct glb_encap) == 20 + 8 + 8 + 4 * GUE_MAX_LISTED, "GLB's encapsulation: IPv4, UDP, GUE");
#define GUE_OFF __builtin_offsetof(struct glb_encap, gue)
#define HOPS_OFF (GUE_OFF + __builtin_offsetof(struct glb_gue_hdr, hops))
_Static_assert(GUE_OFF == 28 && HOPS_OFF == 36, "the stores below write the words they mean to");

static __always_inline void count(struct dir_counters *c, int i)
{
	if (i >= 0 && i < DIR_C_MAX)
		c->c[i]++;
}

static __always_inline int pass(struct dir_counters *c, int reason)
{
	count(c, reason);
	return XDP_PASS;
}

/* glb_result is what GLB's XDP director would have counted a frame this
 * program passes as (glb_encap.c, with glb-hashing's packet_parsing.h).
 * Its parser knows only the IPv4 and IPv6 ethertypes (a VLAN tag is
 * unknown to it), takes an IPv4 header as 20 bytes, reads no IPv6
 * extension header, and needs past the IP header the ports, or an ICMP
 * header (8 bytes for IPv4, 4 for IPv6) and, for a destination
 * unreachable or a packet too big, the quoted IP header and ports, which
 * it reads reversed. A frame it cannot read is UnknownFormat. Otherwise it
 * looks up (destination, protocol, port), ICMP with port 0, among the
 * binds (ICMP's only while echo is forwarded): Matched, or NoMatchingBind.
 * The trie answers here, as it does for every packet, without counting.
 * Only passed frames come here: one function, out of the steered packets'
 * way. */
static __noinline int glb_result(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(p + 14) > end)
		return DIR_C_GLB_UNKNOWN_FORMAT;
	__be16 etype = *(__be16 *)(p + 12);
	struct flow f = {};
	__u8 *ports;
	int icmp = 0;
	if (etype == bpf_htons(ETH_P_IP)) {
		if ((void *)(p + 38) > end) /* the header and the ports, or the ICMP type */
			return DIR_C_GLB_UNKNOWN_FORMAT;
		f.family = DIR_FAMILY_IPV4;
		f.proto = p[23];
		__builtin_memcpy(f.vip, p + 30, 4);
		ports = p + 34;
		if (f.proto == IPPROTO_ICMP) {
			if ((void *)(p + 42) > end)
				return DIR_C_GLB_UNKNOWN_FORMAT;
			icmp = 1;
			if (p[34] == ICMP_DEST_UNREACH_) {
				if ((void *)(p + 66) > end)
					return DIR_C_GLB_UNKNOWN_FORMAT;
				icmp = 0;
				f.proto = p[42 + 9];
				__builtin_memcpy(f.vip, p + 42 + 12, 4); /* the quoted source */
				ports = p + 62;                           /* the quoted ports */
			}
		}
	} else if (etype == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(p + 58) > end)
			return DIR_C_GLB_UNKNOWN_FORMAT;
		f.family = DIR_FAMILY_IPV6;
		f.proto = p[20];
		__builtin_memcpy(f.vip, p + 38, 16);
		ports = p + 54;
		if (f.proto == IPPROTO_ICMPV6_) {
			icmp = 1;
			if (p[54] == ICMPV6_PKT_TOOBIG_) {
				if ((void *)(p + 106) > end)
					return DIR_C_GLB_UNKNOWN_FORMAT;
				icmp = 0;
				f.proto = p[62 + 6];
				__builtin_memcpy(f.vip, p + 62 + 8, 16); /* the quoted source */
				ports = p + 102;
			}
		}
	} else {
		return DIR_C_GLB_UNKNOWN_FORMAT;
	}
	if (!icmp) {
		if ((etype == bpf_htons(ETH_P_IP) && p[23] == IPPROTO_ICMP) || (etype == bpf_htons(ETH_P_IPV6) && p[20] == IPPROTO_ICMPV6_))
			__builtin_memcpy(&f.vip_port, ports, 2); /* a quoted packet's source port is the VIP's */
		else
			__builtin_memcpy(&f.vip_port, ports + 2, 2);
	}
	__u32 zero = 0;
	struct dir_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return DIR_C_GLB_NO_MATCHING_BIND;
	/* GLB binds ICMP at port 0, and only while echo is forwarded; the
	 * trie's ICMP groups hold every port. */
	if (f.proto == (f.family == DIR_FAMILY_IPV4 ? IPPROTO_ICMP : IPPROTO_ICMPV6_) && (f.vip_port || !cfg->forward_icmp_echo))
		return DIR_C_GLB_NO_MATCHING_BIND;
	__u32 gen = cfg->bind_gen & (DIR_BIND_GENS - 1);
	void *trie = bpf_map_lookup_elem(&binds, &gen);
	if (trie && lookup_trie(trie, &f) >= 0)
		return DIR_C_GLB_MATCHED;
	return DIR_C_GLB_NO_MATCHING_BIND;
}

/* pass_frame passes a frame that is not steered for reason, a
 * DIR_C_PASS_ counter, counting what GLB would call it as well. */
static __always_inline int pass_frame(struct xdp_md *ctx, struct dir_counters *c, int reason)
{
	count(c, reason);
	count(c, glb_result(ctx));
	return XDP_PASS;
}

static __always_inline void traffic(void *map, __u32 key, __u64 bytes)
{
	struct dir_traffic *t = bpf_map_lookup_elem(map, &key);
	if (t) {
		t->packets++;
		t->bytes += bytes;
	}
}

/* encapsulate moves the L2 header of l2len bytes forward by the encap size
 * and writes the GUE headers behind it. l2len is a constant at each call
 * site so the copies are fixed-size. */
static __always_inline int encapsulate(struct xdp_md *ctx, struct dir_counters *c, const struct dir_config *cfg,
				       __u32 l2len, __u32 ip_len, __u8 ip_family, __be32 hops[GUE_MAX_HOPS],
				       __u32 nhops, __u16 sport)
{
	__u32 listed = nhops - 1;
	__u32 esize = GLB_ENCAP_SIZE(nhops);

	if (bpf_xdp_adjust_head(ctx, -(int)esize))
		return pass(c, DIR_C_ERROR_ADJUST_HEAD);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* Always true for a packet that parsed (it holds an IP header and at
	 * least 8 more bytes); the check is for the verifier. */
	if (data + l2len + sizeof(struct glb_encap) > end) {
		bpf_xdp_adjust_head(ctx, (int)esize);
		return pass(c, DIR_C_ERROR_BOUNDS);
	}

	/* Move the L2 header to the new front: it started esize bytes later,
	 * and esize >= 40 > l2len, so the ranges do not overlap. New source
	 * MAC: the frame's destination. New destination: the gateway. */
	__u8 *eth = data;
	__u8 *old = data + esize;
	/* Eight-byte moves: each writes two bytes too many, which the next
	 * store overwrites (the gateway MAC is followed by other fields of the
	 * config; byte copies would cost twelve loads and twelve stores). */
	*(__u64 *)eth = *(const __u64 *)cfg->gateway_mac;
	*(__u64 *)(eth + 6) = *(const __u64 *)old;
	if (l2len == 18) {
		*(__u32 *)(eth + 12) = *(const __u32 *)(old + 12); /* the 802.1Q tag */
		*(__be16 *)(eth + 16) = bpf_htons(ETH_P_IP);
	} else {
		*(__be16 *)(eth + 12) = bpf_htons(ETH_P_IP);
	}

	/* The headers go out as a few wide stores of precomputed words rather
	 * than field by field (bitfields cost a load and a mask each). Words
	 * are built in memory order on this little-endian machine; the
	 * checksum is a one's complement sum, which does not care about byte
	 * order as long as it is read and written the same way. Packet data
	 * may be unaligned: XDP runs without strict alignment on x86. */
	struct glb_encap *e = data + l2len;
	__u32 ipsz = esize + ip_len;
	__u16 tot = bpf_htons(ipsz);
	__u32 src = cfg->src_ip, dst = hops[0];
	__u32 sum = cfg->csum_base + tot + (dst & 0xffff) + (dst >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	__u16 check = ~sum;
	__u8 *p = (__u8 *)e;
	*(__u64 *)p = 0x45 | (__u64)tot << 16 | (__u64)0x40 << 48;                 /* version, ihl, tos, tot_len, id, DF */
	*(__u64 *)(p + 8) = 64 | (__u64)IPPROTO_UDP << 8 | (__u64)check << 16 | (__u64)src << 32; /* ttl, proto, check, saddr */
	*(__u32 *)(p + 16) = dst;
	*(__u64 *)(p + 20) = bpf_htons(sport) | (__u64)bpf_htons(GUE_PORT) << 16 |
			     (__u64)bpf_htons(ipsz - sizeof(struct iphdr)) << 32;   /* UDP, checksum 0 */
	__u8 gproto = ip_family == DIR_FAMILY_IPV4 ? IPPROTO_IPIP : IPPROTO_IPV6;
	/* Through p, not e: the compiler takes a packed struct's members as
	 * unaligned and would store them byte by byte. */
	*(__u64 *)(p + GUE_OFF) = (1 + listed) | (__u64)gproto << 8 | (__u64)listed << 56; /* GUE, GLB private data (type 0, next hop 0) */
	*(__u32 *)(p + HOPS_OFF) = hops[1];
	if (listed == 3) {
		*(__u32 *)(p + HOPS_OFF + 4) = hops[2];
		*(__u32 *)(p + HOPS_OFF + 8) = hops[3];
	}
	c->c[DIR_C_ENCAPSULATED]++;
	c->c[DIR_C_ENCAPSULATED_BYTES] += l2len + ipsz;
	return XDP_TX;
}

/* xdp.frags: the program takes multi-buffer frames, so it can be attached
 * to interfaces with jumbo MTUs, and a frame larger than one buffer is
 * steered like any other (its headers are in the first buffer; the
 * encapsulation only touches the front). */
SEC("xdp.frags")
int director(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;

	struct dir_counters *c = bpf_map_lookup_elem(&counters, &zero);
	if (!c)
		return XDP_PASS;
	c->c[DIR_C_PROCESSED]++;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return pass_frame(ctx, c, DIR_C_PASS_MALFORMED);
	__be16 proto = eth->h_proto;
	__u32 l2len = sizeof(struct ethhdr);
	if (proto == bpf_htons(ETH_P_8021Q_)) {
		if (data + 18 > end)
			return pass_frame(ctx, c, DIR_C_PASS_MALFORMED);
		proto = *(__be16 *)(data + 16);
		l2len = 18;
		if (proto == bpf_htons(ETH_P_8021Q_) || proto == bpf_htons(ETH_P_8021AD_))
			return pass_frame(ctx, c, DIR_C_PASS_VLAN);
	} else if (proto == bpf_htons(ETH_P_8021AD_)) {
		return pass_frame(ctx, c, DIR_C_PASS_VLAN);
	}

	struct flow f = {};
	__u32 ip_len = 0;
	__u8 echo = 0;
	int r;
	if (proto == bpf_htons(ETH_P_IP))
		r = parse_ipv4(ctx, data + l2len, end, l2len, &f, &ip_len, &echo);
	else if (proto == bpf_htons(ETH_P_IPV6))
		r = parse_ipv6(ctx, data + l2len, end, l2len, &f, &ip_len, &echo);
	else
		return pass_frame(ctx, c, DIR_C_PASS_NOT_IP);
	if (r)
		return pass_frame(ctx, c, r);
	/* The outer IPv4 length must hold the largest encapsulation and the
	 * packet. Only an IPv6 packet near 64 KiB, or a GRO frame replayed
	 * from a capture, comes near. Checked here, before the bind, so that a
	 * packet's fate stays a function of its flow and its size alone. */
	if (ip_len > 0xffff - sizeof(struct glb_encap))
		return pass_frame(ctx, c, DIR_C_PASS_TOO_BIG);

	struct dir_config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return pass(c, DIR_C_ERROR_NO_CONFIG);
	const __u64 *state = NULL;
	int slot = lookup_bind(&f, c, cfg->bind_gen, &state);
	if (slot < 0)
		return pass_frame(ctx, c, DIR_C_PASS_NO_BIND);
	if (!cfg->configured)
		return pass(c, DIR_C_ERROR_NO_CONFIG);
	if (echo && !cfg->forward_icmp_echo)
		return pass_frame(ctx, c, DIR_C_PASS_ICMP_ECHO_OFF);

	__u32 s = slot;
	void *inner = bpf_map_lookup_elem(&tables, &s);
	if (!inner)
		return pass(c, DIR_C_ERROR_NO_TABLE);
	struct dir_table *t = bpf_map_lookup_elem(inner, &zero);
	if (!t)
		return pass(c, DIR_C_ERROR_NO_TABLE);
	c->c[DIR_C_MATCHED]++;

	__be32 hops[GUE_MAX_HOPS] = {};
	__u64 h = hash_flow(t->hash_key, state, &f, cfg->hash_fields);
	struct dir_row *row = &t->rows[h & DIR_ROW_MASK];
	__u32 primary = row->primary;
	hops[0] = t->hop_addr[primary];
	hops[1] = t->hop_addr[row->secondary];
	__u32 nhops = 2;
	if (cfg->alt_hash_fields) {
		__u64 h2 = hash_flow(t->hash_key, state, &f, cfg->alt_hash_fields);
		struct dir_row *alt = &t->rows[h2 & DIR_ROW_MASK];
		hops[2] = t->hop_addr[alt->primary];
		hops[3] = t->hop_addr[alt->secondary];
		nhops = GUE_MAX_HOPS;
	}

	/* Per-backend counters only: a table's traffic is the sum of its
	 * backends', so counting it again would cost a cache line per packet. */
	__u32 stats = t->stats_id & (DIR_MAX_TABLES - 1);
	traffic(&backend_traffic, stats * DIR_MAX_BACKENDS + (primary & (DIR_MAX_BACKENDS - 1)), ip_len);

	__u16 sport = 0x8000 | ((h ^ bpf_ntohs(f.client_port)) & 0x7fff);
	return encapsulate(ctx, c, cfg, l2len, ip_len, f.family, hops, nhops, sport);
}
