/* What GLB's XDP director would have counted a frame this program passes
 * as, and passing a frame that way. */
#ifndef DIR_GLB_H
#define DIR_GLB_H

#include <linux/in.h>
#include <linux/if_ether.h>
#include <bpf/bpf_endian.h>
#include "build.h"
#include "director.h"
#include "flow.h"
#include "maps.h"
#include "bind.h"
#include "count.h"
#include "capture.h"

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
	return captured(ctx, XDP_PASS, reason, 0, NULL);
}

#endif
