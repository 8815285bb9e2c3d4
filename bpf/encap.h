/* GLB's GUE encapsulation (gue.h), written in front of a packet, and the
 * IPv6 underlay's. */
#ifndef DIR_ENCAP_H
#define DIR_ENCAP_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include "build.h"
#include "director.h"
#include "gue.h"
#include "csum.h"
#include "count.h"
#include "capture.h"

/* Where the stores below write: checked against the structs. */
_Static_assert(sizeof(struct glb_encap) == 20 + 8 + 8 + 4 * GUE_MAX_LISTED, "GLB's encapsulation: IPv4, UDP, GUE");
#define GUE_OFF __builtin_offsetof(struct glb_encap, gue)
#define HOPS_OFF (GUE_OFF + __builtin_offsetof(struct glb_gue_hdr, hops))
_Static_assert(GUE_OFF == 28 && HOPS_OFF == 36, "the stores below write the words they mean to");
_Static_assert(sizeof(struct dir_gue6_encap) == 40 + 8 + 8 + 16 * GUE_MAX_LISTED, "the IPv6 underlay's encapsulation: IPv6, UDP, GUE");
#define GUE6_OFF __builtin_offsetof(struct dir_gue6_encap, gue)
#define HOPS6_OFF (GUE6_OFF + __builtin_offsetof(struct dir_gue6_hdr, hops))
_Static_assert(GUE6_OFF == 48 && HOPS6_OFF == 56, "encapsulate6's stores write the words they mean to");

/* read_l2 reads the frame's first eight bytes (the destination MAC, which
 * becomes the source) and the 802.1Q tag's word before the head moves, so
 * that no pointer depends on the encapsulation's size (it varies with a
 * row's history: 5.10's verifier). 0, or -1 for a frame too short. */
static __always_inline int read_l2(struct xdp_md *ctx, __u64 *mac, __u64 *tag)
{
	void *data = (void *)(long)ctx->data;
	if (data + 18 > (void *)(long)ctx->data_end)
		return -1;
	*mac = *(const __u64 *)data;
	*tag = *(const __u32 *)(data + 12);
	return 0;
}

/* encapsulate moves the L2 header of l2len bytes forward by the encap size
 * and writes the GUE headers behind it: to the primary (its address at
 * dstp, in t's hop_addr), listing second (an address), alt's two hops
 * (the alternate hash's row, or NULL) and nhist earlier primaries from
 * hist (counter indices into t's hop_addr). l2len is a constant at each
 * call site so the copies are fixed-size. */
static __always_inline int encapsulate(struct xdp_md *ctx, struct dir_counters *c, const struct dir_config *cfg,
				       const struct dir_table *t, __u32 l2len, __u32 ip_len, __u8 ip_family,
				       const __be32 *dstp, __be32 second, const struct dir_row *alt, __u32 hist, __u32 nhist,
				       __u16 sport, __u32 at)
{
	__u32 listed = 1 + (alt ? 2 : 0) + (nhist & 7);
	__u32 esize = GLB_ENCAP_SIZE(1 + listed);
	__u64 mac, tag;
	if (read_l2(ctx, &mac, &tag))
		return error_pass(ctx, c, DIR_C_ERROR_BOUNDS);

	if (bpf_xdp_adjust_head(ctx, -(int)esize))
		return error_pass(ctx, c, DIR_C_ERROR_ADJUST_HEAD);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* Always true for a packet that parsed (it holds an IP header and at
	 * least 8 more bytes, and esize is 40 or more); the check is for the
	 * verifier, and covers every hop below. */
	if (data + l2len + sizeof(struct glb_encap) > end) {
		bpf_xdp_adjust_head(ctx, (int)esize);
		return error_pass(ctx, c, DIR_C_ERROR_BOUNDS);
	}

	/* Move the L2 header to the new front: it started esize bytes later,
	 * and esize >= 40 > l2len, so the ranges do not overlap. New source
	 * MAC: the frame's destination. New destination: the gateway. */
	__u8 *eth = data;
	/* Eight-byte moves: each writes two bytes too many, which the next
	 * store overwrites (the gateway MAC is followed by other fields of the
	 * config; byte copies would cost twelve loads and twelve stores). */
	*(__u64 *)eth = *(const __u64 *)cfg->gateway_mac;
	*(__u64 *)(eth + 6) = mac;
	if (l2len == 18) {
		*(__u32 *)(eth + 12) = tag; /* the 802.1Q tag */
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
	__u8 *p = data + l2len;
	__u32 ipsz = esize + ip_len;
	__u16 tot = bpf_htons(ipsz);
	__u32 src = cfg->src_ip, dst = *dstp;
	__u32 sum = cfg->csum_base + tot + (dst & 0xffff) + (dst >> 16);
	__u16 check = ~csum_fold(sum);
	*(__u64 *)p = GUE_IPV4_VERSION_IHL | (__u64)tot << 16 | (__u64)bpf_htons(GUE_IPV4_DF) << 48;        /* version, ihl, tos, tot_len, id, DF */
	*(__u64 *)(p + 8) = GUE_IPV4_TTL | (__u64)GUE_IPV4_PROTO << 8 | (__u64)check << 16 | (__u64)src << 32; /* ttl, proto, check, saddr */
	*(__u32 *)(p + 16) = dst;
	*(__u64 *)(p + 20) = bpf_htons(sport) | (__u64)bpf_htons(GUE_PORT) << 16 |
			     (__u64)bpf_htons(ipsz - sizeof(struct iphdr)) << 32;   /* UDP, checksum 0 */
	__u8 gproto = ip_family == DIR_FAMILY_IPV4 ? IPPROTO_IPIP : IPPROTO_IPV6;
	/* Through p, not a struct: the compiler takes a packed struct's
	 * members as unaligned and would store them byte by byte. */
	*(__u64 *)(p + GUE_OFF) = (1 + listed) | (__u64)gproto << 8 | (__u64)listed << 56; /* GUE, GLB private data (type 0, next hop 0) */
	*(__u32 *)(p + HOPS_OFF) = second;
	/* Each hop at a constant offset: the alternate row's two, then the
	 * earlier primaries, after them or after the secondary. */
	if (alt) {
		*(__u32 *)(p + HOPS_OFF + 4) = t->hop_addr[alt->primary];
		*(__u32 *)(p + HOPS_OFF + 8) = t->hop_addr[alt->secondary];
		if (__builtin_expect(nhist, 0)) {
#pragma unroll
			for (__u32 i = 0; i < DIR_HIST_HOPS; i++)
				if (i < nhist)
					*(__u32 *)(p + HOPS_OFF + 12 + 4 * i) = t->hop_addr[(hist >> 8 * i) & 0xff];
		}
	} else if (__builtin_expect(nhist, 0)) {
#pragma unroll
		for (__u32 i = 0; i < DIR_HIST_HOPS; i++)
			if (i < nhist)
				*(__u32 *)(p + HOPS_OFF + 4 + 4 * i) = t->hop_addr[(hist >> 8 * i) & 0xff];
	}
	c->c[DIR_C_ENCAPSULATED]++;
	c->c[DIR_C_ENCAPSULATED_BYTES] += l2len + ipsz;
	return captured(ctx, XDP_TX, DIR_C_ENCAPSULATED, at, (const __u8 *)dstp);
}

/* copy16 copies an IPv6 address in two eight-byte moves. The map sources
 * are 8-aligned (dir_config.src_ip6 and dir_table.hop_addr6 start at
 * multiples of 8: checked in director.h), the packet may not be, which x86
 * allows. __builtin_memcpy of a byte array is sixteen byte loads and
 * stores in BPF: 96 instructions for the two-hop encapsulation. */
static __always_inline void copy16(__u8 *dst, const __u8 *src)
{
	*(__u64 *)dst = *(const __u64 *)src;
	*(__u64 *)(dst + 8) = *(const __u64 *)(src + 8);
}

/* encapsulate6 is encapsulate for a table of IPv6 backends: outer IPv6
 * from the director's IPv6 source to the primary, with flow label flow,
 * and director's IPv6 hop list (gue.h): the second hop, the alternate
 * hash alt's two hops, and nhist earlier primaries from hist. Hops are
 * counter indices. */
static __always_inline int encapsulate6(struct xdp_md *ctx, struct dir_counters *c, const struct dir_config *cfg,
					const struct dir_table *t, __u32 l2len, __u32 ip_len, __u8 ip_family,
					__u32 primary, __u32 secondary, const struct dir_row *alt, __u32 hist, __u32 nhist,
					__u16 sport, __u32 flow, __u32 at)
{
	__u32 listed = 1 + (alt ? 2 : 0) + (nhist & 7);
	__u32 esize = GUE6_ENCAP_SIZE(1 + listed);
	__u64 mac, tag;
	if (read_l2(ctx, &mac, &tag))
		return error_pass(ctx, c, DIR_C_ERROR_BOUNDS);

	if (bpf_xdp_adjust_head(ctx, -(int)esize))
		return error_pass(ctx, c, DIR_C_ERROR_ADJUST_HEAD);
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* Always true for a packet that parsed; for the verifier. Each hop
	 * past the first three is checked where it is written. */
	if (data + l2len + esize > end || data + l2len + GUE6_ENCAP_SIZE(2) > end ||
	    (alt && data + l2len + GUE6_ENCAP_SIZE(4) > end)) {
		bpf_xdp_adjust_head(ctx, (int)esize);
		return error_pass(ctx, c, DIR_C_ERROR_BOUNDS);
	}
	__u8 *eth = data;
	*(__u64 *)eth = *(const __u64 *)cfg->gateway_mac6; /* two bytes too many, overwritten next */
	*(__u64 *)(eth + 6) = mac;
	if (l2len == 18) {
		*(__u32 *)(eth + 12) = tag; /* the 802.1Q tag */
		*(__be16 *)(eth + 16) = bpf_htons(ETH_P_IPV6);
	} else {
		*(__be16 *)(eth + 12) = bpf_htons(ETH_P_IPV6);
	}

	__u8 *p = data + l2len;
	__u16 plen = esize - 40 + ip_len;
	*(__be32 *)p = bpf_htonl((__u32)GUE_IPV6_VERSION << 28 | flow);
	*(__u32 *)(p + 4) = bpf_htons(plen) | (__u32)GUE_IPV6_NEXT_HEADER << 16 | (__u32)GUE_IPV6_HOP_LIMIT << 24;
	copy16(p + 8, cfg->src_ip6);
	copy16(p + 24, t->hop_addr6[primary & (DIR_MAX_BACKENDS - 1)]);
	*(__u64 *)(p + 40) = bpf_htons(sport) | (__u64)bpf_htons(GUE_PORT) << 16 | (__u64)bpf_htons(plen) << 32; /* UDP, checksum 0 */
	__u8 gproto = ip_family == DIR_FAMILY_IPV4 ? IPPROTO_IPIP : IPPROTO_IPV6;
	*(__u64 *)(p + GUE6_OFF) = (1 + 4 * listed) | (__u64)gproto << 8 |
				   (__u64)bpf_htons(GUE_PRIVATE_TYPE_DIRECTOR_V6) << 32 | (__u64)listed << 56;
	copy16(p + HOPS6_OFF, t->hop_addr6[secondary & (DIR_MAX_BACKENDS - 1)]);
	if (alt) {
		copy16(p + HOPS6_OFF + 16, t->hop_addr6[alt->primary]);
		copy16(p + HOPS6_OFF + 32, t->hop_addr6[alt->secondary]);
	}
	if (__builtin_expect(nhist, 0)) {
		/* Each at a constant offset from one of the two places the
		 * earlier primaries start, checked where it is written. */
		if (alt) {
#pragma unroll
			for (__u32 i = 0; i < DIR_HIST_HOPS; i++)
				if (i < nhist && p + HOPS6_OFF + 48 + 16 * (i + 1) <= (__u8 *)end)
					copy16(p + HOPS6_OFF + 48 + 16 * i, t->hop_addr6[(hist >> 8 * i) & 0xff]);
		} else {
#pragma unroll
			for (__u32 i = 0; i < DIR_HIST_HOPS; i++)
				if (i < nhist && p + HOPS6_OFF + 16 + 16 * (i + 1) <= (__u8 *)end)
					copy16(p + HOPS6_OFF + 16 + 16 * i, t->hop_addr6[(hist >> 8 * i) & 0xff]);
		}
	}
	c->c[DIR_C_ENCAPSULATED]++;
	c->c[DIR_C_ENCAPSULATED_BYTES] += l2len + esize + ip_len;
	return captured(ctx, XDP_TX, DIR_C_ENCAPSULATED, at, t->hop_addr6[primary & (DIR_MAX_BACKENDS - 1)]);
}

#endif
