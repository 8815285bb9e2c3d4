/* Parsing a frame up to its flow: IPv4 and IPv6 (Ethernet is the entry's),
 * with the ICMP errors that quote a flow, and echo requests. */
#ifndef DIR_PARSE_H
#define DIR_PARSE_H

#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_endian.h>
#include "build.h"
#include "director.h"
#include "flow.h"
#include "csum.h"

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
	return l2len + tot <= frame_len(ctx);
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

/* parse_ipv4 and parse_ipv6 fill f, the IP packet's length, what kind of
 * ICMP packet it is. */
static __always_inline int parse_ipv4(struct xdp_md *ctx, void *ip, void *end, __u32 l2len, struct flow *f, __u32 *ip_len,
				      __u8 *icmp_kind)
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
	if (iph->protocol == IPPROTO_TCP || iph->protocol == IPPROTO_UDP) {
		f->l4off = l2len + hl;
		return parse_l4(iph->protocol, l4, ip_end, end, f);
	}
	if (iph->protocol != IPPROTO_ICMP)
		return DIR_C_PASS_PROTO;

	__u8 *icmp = l4;
	if (OUTSIDE(icmp, 8, ip_end, end))
		return BAD_READ(icmp, 8, ip_end);
	if (icmp[0] == ICMP_ECHO_) {
		f->proto = IPPROTO_ICMP;
		*icmp_kind = ICMP_KIND_ECHO;
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
	*icmp_kind = ICMP_KIND_ERROR;
	f->l4off = l2len + hl + 8 + qhl; /* the quoted one's (QUIC-LB) */
	return ports((void *)q + qhl, ip_end, end, f, 1);
}

static __always_inline int ipv6_ext(__u8 nh)
{
	return nh == 0 || nh == 43 || nh == 60; /* hop-by-hop, routing, destination options */
}

static __always_inline int parse_ipv6(struct xdp_md *ctx, void *ip, void *end, __u32 l2len, struct flow *f, __u32 *ip_len,
				      __u8 *icmp_kind)
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
	__u32 off = l2len + 40;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (!ipv6_ext(nh))
			break;
		__u8 *h = p;
		if (OUTSIDE(h, 2, ip_end, end))
			return BAD_READ(h, 2, ip_end);
		nh = h[0];
		p += (h[1] + 1) * 8;
		off += (h[1] + 1) * 8;
	}
	if (ipv6_ext(nh))
		return DIR_C_PASS_IPV6_EXT;
	if (nh == 44)
		return DIR_C_PASS_FRAGMENT;
	if (p > ip_end)
		return DIR_C_PASS_MALFORMED;
	if (nh == IPPROTO_TCP || nh == IPPROTO_UDP) {
		f->l4off = off;
		return parse_l4(nh, p, ip_end, end, f);
	}
	if (nh != IPPROTO_ICMPV6_)
		return DIR_C_PASS_PROTO;

	__u8 *icmp = p;
	if (OUTSIDE(icmp, 8, ip_end, end))
		return BAD_READ(icmp, 8, ip_end);
	if (icmp[0] == ICMPV6_ECHO_REQUEST_) {
		f->proto = IPPROTO_ICMPV6_;
		*icmp_kind = ICMP_KIND_ECHO;
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
	*icmp_kind = ICMP_KIND_ERROR;
	f->l4off = off + 8 + 40; /* the quoted one's (QUIC-LB) */
	return ports(q + 1, ip_end, end, f, 1);
}

#endif
