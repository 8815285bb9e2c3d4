//go:build ignore

/* backend: GLB's proxy side in XDP, for each backend host's receiving
 * interface. It replaces GLB's glb-redirect iptables module and needs no
 * FOU or IPIP support in the kernel.
 *
 * For a GUE packet to UDP port 19523 in GLB's format, with the inner packet
 * going to a VIP this host serves:
 *   - a TCP SYN, a TCP segment of a connection this host knows (socket
 *     lookup), or anything that is not TCP: decapsulate, and hand the inner
 *     packet to the local stack (the VIP is configured locally; responses go
 *     straight to the client);
 *   - any other TCP segment: forward it to the next hop in GLB's hop list:
 *     outer source = this host, outer destination = hops[next hop], next hop
 *     index + 1. When the list is exhausted, decapsulate locally anyway.
 *     A next hop whose neighbour entry the kernel has not resolved, or that
 *     is out another interface, is left to the kernel: the outer destination
 *     rewritten (the source kept: the kernel takes a packet from one of its
 *     own addresses for a spoofed one), the packet is passed to the stack,
 *     which forwards it, resolving the neighbour as it does.
 * A GUE packet whose inner packet is not to one of this host's addresses
 * (those GUE is accepted for) is dropped: decapsulated, the kernel would
 * forward it, relaying whatever a spoofed GUE packet carried.
 * Nothing is sent on unless the operator listed whom the backend trusts
 * (be_trust: the directors and the other backends): then GUE from a source
 * not listed is dropped, and so is a packet whose next hop is not listed.
 * With no list, GUE is taken from anyone but never sent on (second chance
 * off), so a spoofed packet is never relayed, by XDP or by the stack.
 * Everything else is passed untouched. */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "csum.h"
#include "gue.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_INET_ 2
#define AF_INET6_ 10

struct be_config {
	__be32 self_ip; /* this host's address: the source of forwarded packets */
	__u8 configured;
	__u8 trust_listed;      /* be_trust and be_trust6 hold the trusted sources and next hops; 0: none listed, nothing sent on */
	__u16 no_second_chance; /* decapsulate everything: only for showing what second chance prevents */
	__u8 self_ip6[16];      /* its IPv6 address: the source of packets forwarded over IPv6; zero: none */
};

/* An address prefix, the key of the LPM tries below (prefixlen counts the
 * bits of addr that matter; a lookup gives the whole address). */
struct be_prefix4 {
	__u32 prefixlen;
	__be32 addr;
};

struct be_prefix6 {
	__u32 prefixlen;
	__u8 addr[16];
};

enum be_counter {
	BE_C_PROCESSED = 0,
	BE_C_DECAP_SYN,        /* decapsulated: a new connection */
	BE_C_DECAP_KNOWN,      /* decapsulated: a connection this host has */
	BE_C_DECAP_NOT_TCP,    /* decapsulated: not TCP */
	BE_C_DECAP_LAST_HOP,   /* decapsulated: nowhere left to send it */
	BE_C_FORWARDED,        /* sent on to the next hop */
	BE_C_PASS_NOT_GUE,     /* not for us: passed untouched */
	BE_C_DROP_MALFORMED,   /* GUE for us, but broken */
	BE_C_DROP_NO_ROUTE,    /* the next hop could not be resolved */
	BE_C_DROP_NO_CONFIG,
	BE_C_GUE6,             /* of the GUE packets for us above, those over IPv6 */
	BE_C_DROP_NOT_LOCAL,   /* GUE for us whose inner packet is to another host: never relayed */
	BE_C_FORWARDED_STACK,  /* sent on to the next hop through the kernel (its neighbour unresolved, or out another interface) */
	BE_C_SECOND_CHANCE_IN, /* of the GUE packets for us, those another backend sent on (next hop index above 0):
				* a drained backend's old connections still arriving */
	BE_C_DROP_UNTRUSTED,     /* GUE for us from a source not in be_trust (when a list is given): never taken or sent on */
	BE_C_DROP_UNTRUSTED_HOP, /* GUE to send on to a next hop not in be_trust: never sent */
	BE_C_MAX,
};

struct be_counters {
	__u64 c[BE_C_MAX];
};

const struct be_config *unused_be_config __attribute__((unused));
const struct be_counters *unused_be_counters __attribute__((unused));
const enum be_counter *unused_be_counter __attribute__((unused));
const struct be_prefix4 *unused_be_prefix4 __attribute__((unused));
const struct be_prefix6 *unused_be_prefix6 __attribute__((unused));

/* The backend's settings (struct be_config: its own addresses, second
 * chance on or off), one entry, written by 'backend attach'. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct be_config);
} be_cfg SEC(".maps");

/* The backend program's counters (enum be_counter), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct be_counters);
} be_stats SEC(".maps");

/* The destinations GUE is accepted for, outer and inner, besides self_ip:
 * the prefixes the host's routing table says are local (its addresses, and
 * a prefix held on lo), as the control plane found them. LPM tries, so that
 * a whole prefix is one entry. */
#define BE_MAX_PREFIXES 1024
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, BE_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct be_prefix4);
	__type(value, __u8);
} be_accept SEC(".maps");

/* The same for GUE over IPv6 (docs/wire.md), and self_ip6. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, BE_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct be_prefix6);
	__type(value, __u8);
} be_accept6 SEC(".maps");

/* Whom the backend trusts (trust_listed): the outer sources GUE is taken
 * from and the next hops it is sent on to, the directors and the other
 * backends, as the operator listed them ('backend attach --trust'). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, BE_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct be_prefix4);
	__type(value, __u8);
} be_trust SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, BE_MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct be_prefix6);
	__type(value, __u8);
} be_trust6 SEC(".maps");

/* in4 and in6 say whether an address is in one of the tries above. */
static __always_inline int in4(void *trie, __be32 a)
{
	struct be_prefix4 k = {.prefixlen = 32, .addr = a};
	return bpf_map_lookup_elem(trie, &k) != NULL;
}

static __always_inline int in6(void *trie, const void *a)
{
	struct be_prefix6 k = {.prefixlen = 128};
	__builtin_memcpy(k.addr, a, 16);
	return bpf_map_lookup_elem(trie, &k) != NULL;
}

#include "capture.h"

const struct dir_capture *unused_be_capture __attribute__((unused));
const struct dir_capture_meta *unused_be_capture_meta __attribute__((unused));
const struct dir_capture_cpu *unused_be_capture_cpu __attribute__((unused));

/* same16 compares two IPv6 addresses (clang has no memcmp for BPF). */
static __always_inline int same16(const void *a, const void *b)
{
	const __u64 *x = a, *y = b;
	return x[0] == y[0] && x[1] == y[1];
}

/* drop counts a GUE packet for this host that cannot be handled, and
 * drops it. */
static __always_inline int drop(struct xdp_md *ctx, struct be_counters *c, int reason)
{
	c->c[reason]++;
	return captured(ctx, XDP_DROP, reason, 0, NULL);
}

/* decap strips everything between the Ethernet header and the inner packet
 * (outer IPv4, UDP, GUE and its hop list: `strip` bytes) and hands the inner
 * packet to the stack. */
static __always_inline int decap(struct xdp_md *ctx, __u32 strip, __be16 inner_proto, struct be_counters *c, int reason)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (strip > 1024)
		return XDP_DROP;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	struct ethhdr copy = *eth;
	if (bpf_xdp_adjust_head(ctx, (int)strip))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, copy.h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_source, copy.h_source, ETH_ALEN);
	eth->h_proto = inner_proto;
	c->c[reason]++;
	return captured(ctx, XDP_PASS, reason, 0, NULL);
}

/* send_on sends a packet whose outer header now goes to the next hop back
 * out of the interface it came in by (route), to the MAC fib found. */
static __always_inline int send_on(struct xdp_md *ctx, struct be_counters *c, struct ethhdr *eth, const struct bpf_fib_lookup *fib)
{
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	c->c[BE_C_FORWARDED]++;
	return captured(ctx, XDP_TX, BE_C_FORWARDED, 0, NULL);
}

/* route finds how a packet goes on to the next hop that fib names: 1 out
 * of the interface it came in by (fib then holds the MACs, for send_on),
 * 0 through the kernel (its neighbour unresolved, or out another
 * interface), -1 nowhere. The host sends it itself, so the first lookup is
 * an egress one, which looks only out of the interface it came in by; a
 * next hop out another is found by a lookup as the kernel forwards. */
static __always_inline int route(struct xdp_md *ctx, struct bpf_fib_lookup *fib)
{
	struct bpf_fib_lookup again = *fib; /* the lookup writes over its input */
	int rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), BPF_FIB_LOOKUP_OUTPUT);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		return fib->ifindex == ctx->ingress_ifindex ? 1 : 0;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return 0;
	rc = bpf_fib_lookup(ctx, &again, sizeof(again), 0);
	return rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH ? 0 : -1;
}

/* to_stack passes a packet whose outer header now goes to the next hop
 * to the kernel, which forwards it: it resolves a neighbour the fib lookup
 * found unresolved (queueing the packet meanwhile), and sends out another
 * interface, which an XDP redirect cannot do on every driver. */
static __always_inline int to_stack(struct xdp_md *ctx, struct be_counters *c)
{
	c->c[BE_C_FORWARDED_STACK]++;
	return captured(ctx, XDP_PASS, BE_C_FORWARDED_STACK, 0, NULL);
}

/* local_or_next decides for a GUE packet for this host, whose inner
 * packet (inner_ipproto 4 or 41) starts at inner, strip bytes after the
 * Ethernet header: decapsulated for the local stack when it is a new
 * connection, one this host knows, or not TCP (the XDP action, >= 0), or
 * -1: on to the next hop. */
static __always_inline int local_or_next(struct xdp_md *ctx, struct be_counters *c, const struct be_config *cfg, void *inner, void *end,
					 __u8 inner_ipproto, __u32 strip)
{
	__be16 inner_proto = inner_ipproto == IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	/* Is it a TCP segment, and does this host know its connection? */
	struct bpf_sock_tuple tuple = {};
	__u32 tuple_len;
	struct tcphdr *tcp;
	if (inner_ipproto == IPPROTO_IPIP) {
		struct iphdr *iip = inner;
		if ((void *)(iip + 1) > end || iip->version != 4 || iip->ihl < 5)
			return drop(ctx, c, BE_C_DROP_MALFORMED);
		if (iip->daddr != cfg->self_ip && !in4(&be_accept, iip->daddr))
			return drop(ctx, c, BE_C_DROP_NOT_LOCAL);
		if (iip->protocol != IPPROTO_TCP)
			return decap(ctx, strip, inner_proto, c, BE_C_DECAP_NOT_TCP);
		/* Options, if any, before the TCP header (ihl is 4 bits: at most 60 bytes). */
		tcp = inner + ((__u32)iip->ihl & 0xf) * 4;
		if ((void *)(tcp + 1) > end)
			return drop(ctx, c, BE_C_DROP_MALFORMED);
		/* The checked pointer, not one clang would compute again at the
		 * join below: the verifier knows the bounds of this one only. */
		asm volatile("" : "+r"(tcp));
		tuple.ipv4.saddr = iip->saddr;
		tuple.ipv4.daddr = iip->daddr;
		tuple.ipv4.sport = tcp->source;
		tuple.ipv4.dport = tcp->dest;
		tuple_len = sizeof(tuple.ipv4);
	} else {
		struct ipv6hdr *iip6 = inner;
		if ((void *)(iip6 + 1) > end || iip6->version != 6)
			return drop(ctx, c, BE_C_DROP_MALFORMED);
		struct in6_addr idst = iip6->daddr;
		if (!same16(&idst, cfg->self_ip6) && !in6(&be_accept6, &idst))
			return drop(ctx, c, BE_C_DROP_NOT_LOCAL);
		if (iip6->nexthdr != IPPROTO_TCP)
			return decap(ctx, strip, inner_proto, c, BE_C_DECAP_NOT_TCP);
		tcp = (void *)(iip6 + 1);
		if ((void *)(tcp + 1) > end)
			return drop(ctx, c, BE_C_DROP_MALFORMED);
		__builtin_memcpy(tuple.ipv6.saddr, &iip6->saddr, 16);
		__builtin_memcpy(tuple.ipv6.daddr, &iip6->daddr, 16);
		tuple.ipv6.sport = tcp->source;
		tuple.ipv6.dport = tcp->dest;
		tuple_len = sizeof(tuple.ipv6);
	}
	if (tcp->syn && !tcp->ack)
		return decap(ctx, strip, inner_proto, c, BE_C_DECAP_SYN);
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &tuple, tuple_len, BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		int listening = sk->state == BPF_TCP_LISTEN;
		bpf_sk_release(sk);
		if (!listening)
			return decap(ctx, strip, inner_proto, c, BE_C_DECAP_KNOWN);
	}
	return -1;
}

/* backend6 is the program for GUE over IPv6 (docs/wire.md): the same
 * decisions, forwarding to the next IPv6 hop from self_ip6. */
static __always_inline int backend6(struct xdp_md *ctx, struct be_counters *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > end || ip6->version != 6 || ip6->nexthdr != IPPROTO_UDP)
		goto not_gue;
	struct udphdr *udp = (void *)(ip6 + 1);
	if ((void *)(udp + 1) > end || udp->dest != bpf_htons(GUE_PORT))
		goto not_gue;
	struct be_config *cfg = bpf_map_lookup_elem(&be_cfg, &zero);
	if (!cfg || !cfg->configured)
		return drop(ctx, c, BE_C_DROP_NO_CONFIG);
	struct in6_addr daddr = ip6->daddr;
	if (!same16(&daddr, cfg->self_ip6) && !in6(&be_accept6, &daddr))
		goto not_gue; /* GUE for another host */
	c->c[BE_C_GUE6]++;
	struct in6_addr saddr = ip6->saddr;
	if (cfg->trust_listed && !in6(&be_trust6, &saddr))
		return drop(ctx, c, BE_C_DROP_UNTRUSTED);

	/* director's IPv6 hop list (gue.h): hlen = 1 + 4 * hops. */
	struct dir_gue6_hdr *gue = (void *)(udp + 1);
	if ((void *)gue + __builtin_offsetof(struct dir_gue6_hdr, hops) > end)
		return drop(ctx, c, BE_C_DROP_MALFORMED);
	__u8 hlen = gue->hlen & GUE_HLEN_MASK, inner_ipproto = gue->proto;
	__u8 next = gue->next_hop, count = gue->hop_count;
	if ((gue->hlen >> GUE_HLEN_VC_SHIFT) != 0 || gue->private_type != bpf_htons(GUE_PRIVATE_TYPE_DIRECTOR_V6) ||
	    count > GUE_MAX_LISTED || hlen != 1 + 4 * count || (inner_ipproto != IPPROTO_IPIP && inner_ipproto != IPPROTO_IPV6))
		return drop(ctx, c, BE_C_DROP_MALFORMED);
	if (next > 0)
		c->c[BE_C_SECOND_CHANCE_IN]++;
	void *inner = (void *)gue + 4 + 4 * (__u32)hlen;
	int r = local_or_next(ctx, c, cfg, inner, end, inner_ipproto, inner - (void *)ip6);
	if (r >= 0)
		return r;

	/* Not ours: on to the next hop, if there is one. */
	const __u64 *self6 = (const __u64 *)cfg->self_ip6;
	if (next >= count || cfg->no_second_chance || !cfg->trust_listed || (self6[0] == 0 && self6[1] == 0))
		return decap(ctx, inner - (void *)ip6, inner_ipproto == IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6),
			     c, BE_C_DECAP_LAST_HOP);
	/* Each hop at its own constant offset, as for IPv4 (6.1, 6.12). */
	__u8 *dst = NULL;
#pragma unroll
	for (__u32 i = 0; i < GUE_MAX_LISTED; i++)
		if (next == i && (void *)&gue->hops[i + 1] <= end)
			dst = gue->hops[i];
	if (!dst)
		return drop(ctx, c, BE_C_DROP_MALFORMED);
	if (!in6(&be_trust6, dst))
		return drop(ctx, c, BE_C_DROP_UNTRUSTED_HOP);

	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET6_;
	__builtin_memcpy(fib.ipv6_src, cfg->self_ip6, 16);
	__builtin_memcpy(fib.ipv6_dst, dst, 16);
	fib.ifindex = ctx->ingress_ifindex;
	fib.l4_protocol = IPPROTO_UDP;
	int how = route(ctx, &fib);
	if (how < 0)
		return drop(ctx, c, BE_C_DROP_NO_ROUTE);
	int by_stack = how == 0;
	gue->next_hop = next + 1;
	__builtin_memcpy(&ip6->daddr, dst, 16);
	ip6->hop_limit = GUE_IPV6_HOP_LIMIT;
	/* UDP's checksum is 0 (RFC 6935): nothing to update. */
	if (by_stack)
		return to_stack(ctx, c);
	__builtin_memcpy(&ip6->saddr, cfg->self_ip6, 16);
	return send_on(ctx, c, eth, &fib);

not_gue:
	c->c[BE_C_PASS_NOT_GUE]++;
	return captured(ctx, XDP_PASS, BE_C_PASS_NOT_GUE, 0, NULL);
}

SEC("xdp")
int backend(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct be_counters *c = bpf_map_lookup_elem(&be_stats, &zero);
	if (!c)
		return XDP_PASS;
	c->c[BE_C_PROCESSED]++;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		goto not_gue;
	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return backend6(ctx, c);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		goto not_gue;
	struct iphdr *ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
		goto not_gue;
	if (ip->frag_off & bpf_htons(0x3fff))
		goto not_gue;
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end || udp->dest != bpf_htons(GUE_PORT))
		goto not_gue;
	struct be_config *cfg = bpf_map_lookup_elem(&be_cfg, &zero);
	if (!cfg || !cfg->configured) {
		return drop(ctx, c, BE_C_DROP_NO_CONFIG);
	}
	if (ip->daddr != cfg->self_ip && !in4(&be_accept, ip->daddr))
		goto not_gue; /* GUE for another host */
	if (cfg->trust_listed && !in4(&be_trust, ip->saddr))
		return drop(ctx, c, BE_C_DROP_UNTRUSTED);

	/* GUE (gue.h): version 0, C 0, GLB's private data, hlen = 1 + hops. */
	struct glb_gue_hdr *gue = (void *)(udp + 1);
	if ((void *)gue + __builtin_offsetof(struct glb_gue_hdr, hops) > end) {
		return drop(ctx, c, BE_C_DROP_MALFORMED);
	}
	__u8 hlen = gue->hlen & GUE_HLEN_MASK, inner_ipproto = gue->proto;
	__u8 next = gue->next_hop, count = gue->hop_count;
	if ((gue->hlen >> GUE_HLEN_VC_SHIFT) != 0 || gue->private_type != bpf_htons(GUE_PRIVATE_TYPE_GLB) || count > GUE_MAX_LISTED ||
	    hlen != 1 + count || (inner_ipproto != IPPROTO_IPIP && inner_ipproto != IPPROTO_IPV6)) {
		return drop(ctx, c, BE_C_DROP_MALFORMED);
	}
	if (next > 0)
		c->c[BE_C_SECOND_CHANCE_IN]++;
	__be32 *hops = gue->hops;
	void *inner = (void *)gue + 4 + 4 * (__u32)hlen;
	__u32 strip = inner - (void *)ip;
	__be16 inner_proto = inner_ipproto == IPPROTO_IPIP ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
	int r = local_or_next(ctx, c, cfg, inner, end, inner_ipproto, strip);
	if (r >= 0)
		return r;

	/* Not ours: on to the next hop, if there is one. */
	if (next >= count || cfg->no_second_chance || !cfg->trust_listed)
		return decap(ctx, strip, inner_proto, c, BE_C_DECAP_LAST_HOP);
	/* Each hop is checked at its own constant offset. Linux 6.1 and 6.12:
	 * their verifiers do not carry a check at a variable offset (hops +
	 * next) over to a read at a constant one. */
	__be32 dst = 0;
	int found = 0;
#pragma unroll
	for (__u32 i = 0; i < GUE_MAX_LISTED; i++) {
		if (next == i && (void *)(hops + i + 1) <= end) {
			dst = hops[i];
			found = 1;
		}
	}
	if (!found)
		return drop(ctx, c, BE_C_DROP_MALFORMED);
	if (!in4(&be_trust, dst))
		return drop(ctx, c, BE_C_DROP_UNTRUSTED_HOP);

	struct bpf_fib_lookup fib = {};
	fib.family = AF_INET_;
	fib.ipv4_src = cfg->self_ip;
	fib.ipv4_dst = dst;
	fib.ifindex = ctx->ingress_ifindex;
	fib.l4_protocol = IPPROTO_UDP;
	int how = route(ctx, &fib);
	if (how < 0) {
		return drop(ctx, c, BE_C_DROP_NO_ROUTE);
	}
	int by_stack = how == 0;
	gue->next_hop = next + 1;
	if (!by_stack)
		ip->saddr = cfg->self_ip;
	ip->daddr = dst;
	ip->ttl = GUE_IPV4_TTL;
	ip->check = 0;
	ip->check = ipv4_csum(ip);
	if (by_stack)
		return to_stack(ctx, c);
	return send_on(ctx, c, eth, &fib);

not_gue:
	c->c[BE_C_PASS_NOT_GUE]++;
	return captured(ctx, XDP_PASS, BE_C_PASS_NOT_GUE, 0, NULL);
}
