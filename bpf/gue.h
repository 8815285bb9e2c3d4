/* GLB's GUE encapsulation, as GLB's directors write it and its proxies
 * (glb-redirect) read it: the wire format's one definition. director.c
 * writes it, backend.c reads it, and Go takes the constants and the layout
 * from here through bpf2go (internal/gue). All multi-byte fields are in
 * network byte order. */
#ifndef GUE_H
#define GUE_H

#include <linux/types.h>

enum gue_const {
	GUE_PORT = 19523,              /* UDP destination port of GUE packets */
	GUE_MAX_HOPS = 4,              /* a row's primary and secondary, and with alt_hash_fields the alternate row's */
	GUE_MAX_LISTED = GUE_MAX_HOPS - 1, /* listed in the header: every hop but the primary, which is the outer destination */
	GUE_PRIVATE_TYPE_GLB = 0,      /* GLB's private data type */
	/* The outer IPv4 header: version 4 and IHL 5, don't-fragment, TTL,
	 * protocol UDP. */
	GUE_IPV4_VERSION_IHL = 0x45,
	GUE_IPV4_DF = 0x4000,          /* frag_off, host order */
	GUE_IPV4_TTL = 64,
	GUE_IPV4_PROTO = 17,           /* IPPROTO_UDP */
	/* glb_gue_hdr.hlen: version (2 bits) and C (1 bit), both 0, above
	 * hlen (5 bits), the private data's 32-bit words. */
	GUE_HLEN_MASK = 0x1f,
	GUE_HLEN_VC_SHIFT = 5,
};

/* The GUE header (version 0, C 0, no flags) and GLB's private data: the
 * hop list. GUE's hlen counts the private data in 32-bit words: 1 + the
 * hops listed. */
struct glb_gue_hdr {
	__u8 hlen;          /* version (2 bits) and C (1 bit), both 0, then hlen (5 bits) */
	__u8 proto;         /* the inner packet's: IPPROTO_IPIP (4) or IPPROTO_IPV6 (41) */
	__be16 flags;       /* 0 */
	__be16 private_type; /* GUE_PRIVATE_TYPE_GLB */
	__u8 next_hop;      /* index in hops of the next backend to try */
	__u8 hop_count;     /* hops listed */
	__be32 hops[GUE_MAX_LISTED];
} __attribute__((packed));

/* What a director puts between the L2 header and the original IP packet:
 * outer IPv4 (IHL 5, DF, TTL 64, to the primary), UDP (source port from
 * the flow hash, checksum 0), GUE. Only the hops used are sent:
 * GLB_ENCAP_SIZE(hops) bytes in all. */
struct glb_encap {
	__u8 ip[20];
	__be16 sport, dport, len, check;
	struct glb_gue_hdr gue;
} __attribute__((packed));

#define GLB_ENCAP_SIZE(nhops) (sizeof(struct glb_encap) - 4 * (GUE_MAX_HOPS - (nhops)))

#endif
