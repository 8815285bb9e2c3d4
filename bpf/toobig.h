/* Packets too big for the underlay once encapsulated (docs/wire.md, "Path
 * MTU"). The encapsulation adds 40 to 120 bytes, so a client packet that
 * fits its own path may not fit the director's: it is answered, as a
 * router on the way would, with ICMP fragmentation-needed or ICMPv6
 * packet-too-big giving the MTU less the encapsulation, and the client
 * sends smaller packets. */
#ifndef DIR_TOOBIG_H
#define DIR_TOOBIG_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "build.h"
#include "director.h"
#include "flow.h"
#include "maps.h"
#include "csum.h"
#include "count.h"
#include "capture.h"
#include "encap.h"

/* No underlay is smaller than IPv6's minimum MTU: an outer packet of up to
 * this many bytes is never checked, so that the small packets (ACKs, SYNs)
 * pay a compare and nothing else. */
#define DIR_MTU_FLOOR 1280
/* How much of the packet a reply quotes: its IP header (options and
 * extension headers included, up to 88 bytes of them over IPv6) and
 * ports, all a client's stack needs to find the connection. A packet this
 * path sees has over 1,100 bytes, so the quote is always there. */
#define DIR_TOO_BIG_QUOTE 128
#define ICMP_FRAG_NEEDED_ 4

/* link_mtu is the MTU GUE packets leave with: the interface's, or
 * outbound_mtu when smaller. The frame leaves by the interface it came in
 * on (XDP_TX). Without bpf_check_mtu (the single-buffer build, for kernels
 * before 5.12), the interface's is what the loader keeps in link_mtus. */
static __always_inline __u32 link_mtu(struct xdp_md *ctx, const struct dir_config *cfg)
{
#ifdef DIR_SINGLE_BUFFER
	__u32 ifindex = ctx->ingress_ifindex;
	const __u32 *known = bpf_map_lookup_elem(&link_mtus, &ifindex);
	__u32 mtu = known ? *known : 0xffff;
#else
	__u32 mtu = 1; /* a length to check; the helper returns the MTU whatever it is */
	if (bpf_check_mtu(ctx, 0, &mtu, 0, 0) < 0)
		mtu = 0xffff;
#endif
	if (cfg->outbound_mtu && cfg->outbound_mtu < mtu)
		mtu = cfg->outbound_mtu;
	return mtu;
}

/* too_big_error counts a failure on the reply's way: XDP_PASS, with the
 * counter above it for check_size's capture. */
static __always_inline int too_big_error(struct dir_counters *c, int reason)
{
	count(c, reason);
	return XDP_PASS | reason << 8;
}

/* too_big_reply turns the frame into the reply (l2len bytes of L2 header
 * and v6, constants at each call, so that every offset is one): the L2 header with its MACs swapped, a new IP
 * header from the packet's destination (the VIP) to its source, the ICMP
 * header, and the first DIR_TOO_BIG_QUOTE bytes of the packet, trimmed to
 * that. Returns -1, untouched, where the frame cannot be (its first buffer
 * too short: never for a packet this large), and too_big_error's XDP_PASS
 * where the helpers fail. The MACs and addresses are read where the
 * packet lies once the headers are made room for (hdr bytes on), just
 * before they are written, rather than kept across the helper calls: kept,
 * they took 44 bytes of stack, which with the datapath's made more than
 * Linux 5.10's verifier allows a call (512 bytes, each frame rounded up to
 * 32). */
static __always_inline int too_big_reply(struct xdp_md *ctx, struct dir_counters *c, __u32 l2len, __u32 v6, __u32 mtu)
{
	__u32 hdr = v6 ? 40 + 8 : 20 + 8;
	__u32 want = l2len + hdr + DIR_TOO_BIG_QUOTE;
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(data + l2len + DIR_TOO_BIG_QUOTE) > end)
		return -1;
	if (bpf_xdp_adjust_head(ctx, -(int)hdr))
		return too_big_error(c, DIR_C_ERROR_ADJUST_HEAD);
	int delta = (int)want - (int)frame_len(ctx);
	if (bpf_xdp_adjust_tail(ctx, delta)) {
		bpf_xdp_adjust_head(ctx, (int)hdr);
		return too_big_error(c, DIR_C_ERROR_BOUNDS);
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if ((void *)(data + want) > end) /* the frame is want bytes now: for the verifier */
		return too_big_error(c, DIR_C_ERROR_BOUNDS);

	/* The packet as it came, hdr bytes on: its L2 header, then its IP
	 * header. The new L2 header goes where nothing of it is read; the new
	 * IP header over the old L2 header, whose MACs and tag are written by
	 * then; the old addresses lie past the new headers. */
	__u8 *old = data + hdr;
	__u32 d0 = *(__u32 *)(old + 6), s0 = *(__u32 *)old; /* the reply goes back where the packet came from */
	__u16 d1 = *(__u16 *)(old + 10), s1 = *(__u16 *)(old + 4);
	*(__u32 *)data = d0;
	*(__u16 *)(data + 4) = d1;
	*(__u32 *)(data + 6) = s0;
	*(__u16 *)(data + 10) = s1;
	if (l2len == 18) {
		*(__u32 *)(data + 12) = *(__u32 *)(old + 12); /* the 802.1Q tag */
		*(__be16 *)(data + 16) = bpf_htons(v6 ? ETH_P_IPV6 : ETH_P_IP);
	} else {
		*(__be16 *)(data + 12) = bpf_htons(v6 ? ETH_P_IPV6 : ETH_P_IP);
	}
	__u8 *ip = data + l2len;
	__u8 *oip = old + l2len;
	__u8 *icmp;
	__u64 sum;
	if (v6) {
		icmp = ip + 40;
		*(__be32 *)ip = bpf_htonl(6 << 28);
		*(__be16 *)(ip + 4) = bpf_htons(8 + DIR_TOO_BIG_QUOTE);
		ip[6] = IPPROTO_ICMPV6_;
		ip[7] = 64;
		copy16(ip + 8, oip + 24);  /* from the VIP */
		copy16(ip + 24, oip + 8);  /* to the client */
		/* IPv6 never takes less than 1,280 (RFC 8200). */
		*(__u32 *)icmp = ICMPV6_PKT_TOOBIG_; /* type, code 0, checksum 0 */
		*(__be32 *)(icmp + 4) = bpf_htonl(mtu < 1280 ? 1280 : mtu);
		/* The pseudo-header: addresses, upper-layer length, next header. */
		sum = (__u32)bpf_csum_diff(NULL, 0, (__be32 *)(ip + 8), 32, 0);
		sum += bpf_htonl(8 + DIR_TOO_BIG_QUOTE) + bpf_htonl(IPPROTO_ICMPV6_);
	} else {
		icmp = ip + 20;
		*(__u64 *)ip = 0x45 | (__u64)bpf_htons(20 + 8 + DIR_TOO_BIG_QUOTE) << 16; /* ID 0, no DF: an ICMP error is never too big */
		*(__u32 *)(ip + 8) = 64 | IPPROTO_ICMP << 8;                              /* TTL, protocol, checksum 0 */
		*(__u32 *)(ip + 12) = *(__u32 *)(oip + 16); /* from the VIP */
		*(__u32 *)(ip + 16) = *(__u32 *)(oip + 12); /* to the client */
		*(__u16 *)(ip + 10) = ipv4_csum(ip);
		*(__u32 *)icmp = ICMP_DEST_UNREACH_ | ICMP_FRAG_NEEDED_ << 8;
		*(__be32 *)(icmp + 4) = bpf_htonl(mtu & 0xffff); /* unused, next-hop MTU */
		sum = 0;
	}
	sum += (__u32)bpf_csum_diff(NULL, 0, (__be32 *)icmp, 8 + DIR_TOO_BIG_QUOTE, 0);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	*(__u16 *)(icmp + 2) = ~csum_fold((__u32)sum);
	c->c[DIR_C_ICMP_TOO_BIG]++;
	return XDP_TX; /* captured by the caller: a call deeper, the stack would not hold */
}

/* too_big is what becomes of a packet of ip_len bytes whose encapsulation
 * (esize bytes) takes it over mtu: the reply, as the client's own path
 * would answer it, with mtu less the encapsulation; or -1, counted, for
 * one GLB's way (encapsulated all the same, for the link to carry or
 * drop): IPv4 without DF (a router would fragment it; XDP cannot), an
 * ICMP error (never answered with another), and IPv6 already at the
 * 1,280 bytes no smaller MTU may ask it under. meta is the L2 header's
 * length, the family above it and the ICMP kind above that: five
 * arguments at most for a function call. */
static __noinline int too_big(struct xdp_md *ctx, struct dir_counters *c, __u32 meta, __u32 ip_len, __u32 mtu)
{
	__u32 l2len = (meta & 0xff) == 18 ? 18 : 14, v6 = ((meta >> 8) & 0xff) == DIR_FAMILY_IPV6, kind = meta >> 16;
	__u8 *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if ((void *)(data + 18 + 8) > end)
		goto encapsulate;
	if (kind == ICMP_KIND_ERROR)
		goto encapsulate;
	if (v6 ? ip_len <= 1280 && mtu < 1280 : !(*(__be16 *)(data + l2len + 6) & bpf_htons(0x4000)))
		goto encapsulate;
	int r;
	if (l2len == 18)
		r = v6 ? too_big_reply(ctx, c, 18, 1, mtu) : too_big_reply(ctx, c, 18, 0, mtu);
	else
		r = v6 ? too_big_reply(ctx, c, 14, 1, mtu) : too_big_reply(ctx, c, 14, 0, mtu);
	if (r >= 0)
		return r;
encapsulate:
	c->c[DIR_C_TOO_BIG_ENCAPSULATED]++;
	return -1;
}

/* check_size is the path of a packet whose encapsulation takes it over
 * DIR_MTU_FLOOR: -1 when it fits the link (or goes GLB's way), else the
 * verdict on its reply. */
static __always_inline int check_size(struct xdp_md *ctx, struct dir_counters *c, const struct dir_config *cfg, __u32 l2len,
				      __u8 family, __u8 kind, __u32 ip_len, __u32 esize)
{
	__u32 mtu = link_mtu(ctx, cfg);
	if (ip_len + esize <= mtu)
		return -1;
	/* What the client may send: IPv4 takes no MTU under 68. */
	__u32 room = mtu > esize + 68 ? mtu - esize : 68;
	int r = too_big(ctx, c, l2len | (__u32)family << 8 | (__u32)kind << 16, ip_len, room);
	if (r < 0)
		return r;
	/* Captured here: a call deeper, the stack would not hold. */
	return captured(ctx, r & 0xff, r == XDP_TX ? DIR_C_ICMP_TOO_BIG : (__u32)r >> 8, 0, NULL);
}

#endif
