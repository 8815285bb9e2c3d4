/* GLB's GUE encapsulation, as GLB's directors write it and its proxies
 * (glb-redirect) read it: the wire format's one definition. director.c
 * writes it, backend.c reads it, and Go takes the constants and the layout
 * from here through the object's BTF (bpf/abi, read by
 * internal/datapath/gue). All multi-byte fields are in
 * network byte order. */
#ifndef GUE_H
#define GUE_H

#include <linux/types.h>

enum gue_const {
	GUE_PORT = 19523,              /* UDP destination port of GUE packets */
	/* A row's primary and secondary, with alt_hash_fields the alternate
	 * row's two, then up to four earlier primaries (director.h,
	 * DIR_HIST_HOPS). GLB's hlen has room for 30 IPv4 hops, and for 7
	 * listed IPv6 hops: 8 fits both. */
	GUE_MAX_HOPS = 8,
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
	/* director's IPv6 underlay (docs/wire.md): GUE over IPv6 with a hop
	 * list of IPv6 addresses under a private data type of its own, so that
	 * nothing reading GLB's IPv4 hop list (type 0) takes it for one; a
	 * later layout gets a new type. */
	GUE_PRIVATE_TYPE_DIRECTOR_V6 = 0x6401, /* 'd', layout 1 */
	/* The outer IPv6 header: version 6, traffic class 0, a flow label
	 * from the flow hash (RFC 6438), next header UDP, hop limit. */
	GUE_IPV6_VERSION = 6,
	GUE_IPV6_FLOW_MASK = 0xfffff,
	GUE_IPV6_NEXT_HEADER = 17,
	GUE_IPV6_HOP_LIMIT = 64,
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

/* director's IPv6 hop list: GLB's layout, hops of 16 bytes, its own
 * private data type. GUE's hlen is 1 + 4 * hops listed. */
struct dir_gue6_hdr {
	__u8 hlen;          /* version and C, both 0, then hlen */
	__u8 proto;         /* the inner packet's: 4 or 41 */
	__be16 flags;       /* 0 */
	__be16 private_type; /* GUE_PRIVATE_TYPE_DIRECTOR_V6 */
	__u8 next_hop;      /* index in hops of the next backend to try */
	__u8 hop_count;     /* hops listed */
	__u8 hops[GUE_MAX_LISTED][16];
} __attribute__((packed));

/* The IPv6 underlay's encapsulation: outer IPv6 to the primary, UDP
 * (source port from the flow hash; checksum 0, which RFC 6935 allows a
 * tunnel over IPv6 and the backend program does not read), GUE. Only the
 * hops used are sent: GUE6_ENCAP_SIZE(hops) bytes in all. */
struct dir_gue6_encap {
	__u8 ip6[40];
	__be16 sport, dport, len, check;
	struct dir_gue6_hdr gue;
} __attribute__((packed));

#define GUE6_ENCAP_SIZE(nhops) (sizeof(struct dir_gue6_encap) - 16 * (GUE_MAX_HOPS - (nhops)))

#endif
