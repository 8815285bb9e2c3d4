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
const struct dir_registry *unused_registry __attribute__((unused));
const struct dir_quic_table *unused_quic_table __attribute__((unused));
const struct dir_aes_key *unused_aes_key __attribute__((unused));
const struct dir_history *unused_history __attribute__((unused));
const struct dir_hist_row *unused_hist_row __attribute__((unused));
const struct dir_hist_ghost *unused_hist_ghost __attribute__((unused));
const enum dir_hist_limit *unused_hist_limit __attribute__((unused));
const enum dir_quic_limit *unused_quic_limit __attribute__((unused));
const struct dir_quic_stats *unused_quic_stats __attribute__((unused));
const enum dir_quic_stat_limit *unused_quic_stat_limit __attribute__((unused));
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
const struct dir_gue6_encap *unused_gue6_encap __attribute__((unused));
const enum xdp_action *unused_xdp_action __attribute__((unused));
const struct dir_capture *unused_capture __attribute__((unused));
const struct dir_capture_meta *unused_capture_meta __attribute__((unused));
const struct dir_capture_cpu *unused_capture_cpu __attribute__((unused));
const enum dir_capture_lease *unused_capture_lease __attribute__((unused));

#include "maps.h"
#include "flow.h"
#include "siphash.h"
#include "parse.h"
#include "bind.h"
#include "count.h"
#include "glb.h"
#include "toobig.h"
#include "encap.h"
#include "quic.h"

/* steered is a packet's way through its table's rows, what both
 * underlays' tails share (steer_hops, steer_fits). */
struct steered {
	__u64 h;                   /* the flow hash */
	__u32 primary, second;     /* the first two hops, as counter indices */
	__u32 at;                  /* for a capture: the QUIC counter, table and row */
	__u32 hist;                /* the row's dir_hist_row.hop, one a byte, the first lowest */
	__u32 nhist;               /* how many of them are listed after the other hops */
	const struct dir_row *alt; /* the alternate hash's row, or NULL */
};

/* hist_ne is 1 if hop differs from rp (both below 256), 0 if not, in
 * arithmetic rather than four comparisons' branches. */
static __always_inline __u32 hist_ne(__u32 hop, __u32 rp)
{
	__u32 d = (hop ^ rp) & 0xff;
	asm volatile("" : "+r"(d)); /* or the compiler makes it a comparison again */
	return (d + 0xff) >> 8;
}

/* dir_hist_word reads the earlier primaries a row lists
 * (dir_hist_row.hop) from slot's history, as one word, and counts them
 * (the unused ones hold the row's primary, rp): the word in the low 32
 * bits, the count above. A global function, verified once on its own:
 * inline, its lookups' paths each carried on through the rest of the
 * program, which took 5.10's verifier past its million instructions. */
__noinline __u64 dir_hist_word(__u32 slot, __u32 row, __u32 rp)
{
	__u32 zero = 0;
	slot &= DIR_MAX_SLOTS - 1;
	void *inner = bpf_map_lookup_elem(&history, &slot);
	if (!inner)
		return 0;
	const struct dir_history *h = bpf_map_lookup_elem(inner, &zero);
	if (!h)
		return 0;
	__u32 w = *(const __u32 *)h->rows[row & DIR_ROW_MASK].hop;
	__u64 n = hist_ne(w, rp) + hist_ne(w >> 8, rp) + hist_ne(w >> 16, rp) + hist_ne(w >> 24, rp);
	return w | n << 32;
}

/* steer_hops counts a matched packet and finds its hops: the row its
 * flow hashes to, QUIC-LB's choice of primary where the table routes
 * QUIC, and the alternate hash's row. */
static __always_inline void steer_hops(struct xdp_md *ctx, struct dir_counters *c, const struct dir_config *cfg,
				       const struct dir_table *t, const __u64 *state, const struct flow *f, __u32 l2len,
				       __u32 ip_len, __u8 kind, __u32 slot, struct steered *s)
{
	c->c[DIR_C_MATCHED]++;
	s->h = hash_flow(t->hash_key, state, f, cfg->hash_fields);
	const struct dir_row *row = &t->rows[s->h & DIR_ROW_MASK];
	s->primary = row->primary;
	s->second = row->secondary;
	if (__builtin_expect(t->quic_configs, 0) && f->proto == IPPROTO_UDP) {
		__u64 th = (__u64)quic_tq(t) << 32 | (slot & (DIR_MAX_SLOTS - 1)) << 24 |
			   (__u32)(kind == ICMP_KIND_ERROR) << 16 | (s->second & 0xff) << 8 | (s->primary & 0xff);
		__u32 q = call_quic_hops(ctx, th, f->l4off, l2len + ip_len);
		__u32 counter = (q >> 16) & 0xff;
		count(c, counter);
		if (q & QUIC_HOPS_ICMP)
			count(c, DIR_C_QUIC_ICMP_ROUTED);
		s->primary = q & 0xff;
		s->second = (q >> 8) & 0xff;
		s->at |= counter << 24;
	}
	s->alt = NULL;
	if (cfg->alt_hash_fields) {
		__u64 h2 = hash_flow(t->hash_key, state, f, cfg->alt_hash_fields);
		s->alt = &t->rows[h2 & DIR_ROW_MASK];
	}
}

/* steer_hist finds the earlier primaries of a packet's row, once its size
 * is checked (by the table's longest chain, steer_listed): the paths with
 * history and without then share less for the verifier to walk twice
 * (5.10: 434k instructions processed; 457k read with the row). */
static __always_inline void steer_hist(const struct dir_table *t, __u32 slot, struct steered *s)
{
	s->hist = 0;
	s->nhist = 0;
	if (__builtin_expect(t->hist_hops, 0)) {
		__u64 r = dir_hist_word(slot, s->h, t->rows[s->h & DIR_ROW_MASK].primary);
		s->hist = r;
		s->nhist = (r >> 32) & 7;
	}
}

/* steer_listed is how many hops a packet of the table lists at most
 * after its primary, what its size is checked with: the longest chain,
 * so that every flow of a VIP is told one MTU. */
static __always_inline __u32 steer_listed(const struct dir_table *t, const struct steered *s)
{
	return 1 + (s->alt ? 2 : 0) + (t->hist_hops & 7);
}

/* steer_fits checks the packet's size against the link once encapsulated
 * (esize bytes) and counts the primary's traffic: -1, or the verdict of a
 * packet answered as too big. */
static __always_inline int steer_fits(struct xdp_md *ctx, struct dir_counters *c, const struct dir_config *cfg,
				      const struct dir_table *t, const struct flow *f, __u32 l2len, __u32 ip_len, __u8 kind,
				      __u32 esize, const struct steered *s)
{
	if (__builtin_expect(ip_len + esize > DIR_MTU_FLOOR, 0)) {
		int r = check_size(ctx, c, cfg, l2len, f->family, kind, ip_len, esize);
		if (r >= 0)
			return r;
	}
	/* Per-backend counters only: a table's traffic is the sum of its
	 * backends', so counting it again would cost a cache line per packet. */
	table_traffic(&backend_traffic, t->stats_id & (DIR_MAX_TABLES - 1), s->primary & (DIR_MAX_BACKENDS - 1), ip_len);
	return -1;
}

/* steer6 is the rest of the program for a table of IPv6 backends: the
 * payload length check (it holds the encapsulation but the outer header),
 * the rows, and GUE over IPv6 (encapsulate6). */
static __always_inline int steer6(struct xdp_md *ctx, struct dir_counters *c, const struct dir_config *cfg,
				  const struct dir_table *t, const __u64 *state, struct flow *f, __u32 l2len, __u32 ip_len, __u8 kind,
				  __u32 at, __u32 slot)
{
	if (ip_len > 0xffff - (sizeof(struct dir_gue6_encap) - 40))
		return pass_frame(ctx, c, DIR_C_PASS_TOO_BIG);
	struct steered s = {.at = at};
	steer_hops(ctx, c, cfg, t, state, f, l2len, ip_len, kind, slot, &s);
	int r = steer_fits(ctx, c, cfg, t, f, l2len, ip_len, kind, GUE6_ENCAP_SIZE(1 + steer_listed(t, &s)), &s);
	if (r >= 0)
		return r;
	steer_hist(t, slot, &s);
	__u16 sport = 0x8000 | ((s.h ^ bpf_ntohs(f->client_port)) & 0x7fff);
	return encapsulate6(ctx, c, cfg, t, l2len, ip_len, f->family, s.primary, s.second, s.alt, s.hist, s.nhist, sport,
			    (__u32)(s.h >> 32) & GUE_IPV6_FLOW_MASK, s.at | (s.h & DIR_ROW_MASK));
}

/* xdp.frags (the multi-buffer build, build.h): the program takes
 * multi-buffer frames, so it can be attached to interfaces with jumbo
 * MTUs, and a frame larger than one buffer is steered like any other (its
 * headers are in the first buffer; the encapsulation only touches the
 * front). */
SEC(DIR_XDP_SEC)
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
	__u8 kind = ICMP_KIND_NONE;
	int r;
	if (proto == bpf_htons(ETH_P_IP))
		r = parse_ipv4(ctx, data + l2len, end, l2len, &f, &ip_len, &kind);
	else if (proto == bpf_htons(ETH_P_IPV6))
		r = parse_ipv6(ctx, data + l2len, end, l2len, &f, &ip_len, &kind);
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
		return error_pass(ctx, c, DIR_C_ERROR_NO_CONFIG);
	const __u64 *state = NULL;
	int slot = lookup_bind(&f, c, cfg->bind_gen, &state);
	if (slot < 0)
		return pass_frame(ctx, c, DIR_C_PASS_NO_BIND);
	if (!cfg->configured)
		return error_pass(ctx, c, DIR_C_ERROR_NO_CONFIG);
	if (kind == ICMP_KIND_ECHO && !cfg->forward_icmp_echo)
		return pass_frame(ctx, c, DIR_C_PASS_ICMP_ECHO_OFF);

	__u32 s = slot;
	__u32 at = (s + 1) << 16; /* for a capture: the table, above the row */
	void *inner = bpf_map_lookup_elem(&tables, &s);
	if (!inner)
		return error_pass(ctx, c, DIR_C_ERROR_NO_TABLE);
	struct dir_table *t = bpf_map_lookup_elem(inner, &zero);
	if (!t)
		return error_pass(ctx, c, DIR_C_ERROR_NO_TABLE);
	/* A table of IPv6 backends goes over IPv6: its own path, so that the
	 * IPv4 one pays a compare on a field in the line the key is in. */
	if (__builtin_expect(t->hop_family == DIR_FAMILY_IPV6, 0))
		return steer6(ctx, c, cfg, t, state, &f, l2len, ip_len, kind, at, s);
	struct steered st = {.at = at};
	steer_hops(ctx, c, cfg, t, state, &f, l2len, ip_len, kind, s, &st);
	/* The first two hops' addresses are read here, early, as the row
	 * is: the size check and the counters overlap their loads. */
	const __be32 *dst = &t->hop_addr[st.primary & (DIR_MAX_BACKENDS - 1)];
	__be32 second = t->hop_addr[st.second & (DIR_MAX_BACKENDS - 1)];
	r = steer_fits(ctx, c, cfg, t, &f, l2len, ip_len, kind, GLB_ENCAP_SIZE(1 + steer_listed(t, &st)), &st);
	if (r >= 0)
		return r;
	steer_hist(t, s, &st);
	__u16 sport = 0x8000 | ((st.h ^ bpf_ntohs(f.client_port)) & 0x7fff);
	return encapsulate(ctx, c, cfg, t, l2len, ip_len, f.family, dst, second, st.alt, st.hist, st.nhist, sport,
			   st.at | (st.h & DIR_ROW_MASK));
}
