/* What the director program knows of a packet once parsed: its flow, and
 * the protocol numbers it looks for. */
#ifndef DIR_FLOW_H
#define DIR_FLOW_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88a8
#define IPPROTO_ICMPV6_ 58
#define ICMP_DEST_UNREACH_ 3
#define ICMP_ECHO_ 8
#define ICMPV6_PKT_TOOBIG_ 2
#define ICMPV6_ECHO_REQUEST_ 128

/* What parse_ipv4 and parse_ipv6 say of an ICMP packet they steer. */
enum { ICMP_KIND_NONE = 0, ICMP_KIND_ECHO, ICMP_KIND_ERROR };

/* The flow a packet belongs to, seen from the client. */
struct flow {
	__u8 client[16];   /* source address of the client's packets */
	__u8 vip[16];      /* destination: the bind address */
	__be16 client_port;
	__be16 vip_port;
	__u8 proto;        /* bind protocol: TCP, UDP, or ICMP(v6) for echo */
	__u8 family;
	/* For TCP and UDP, the L4 header's offset in the frame, the quoted
	 * one's in an ICMP error (QUIC-LB reads the payload after it); not
	 * part of the flow's identity. In what was padding, so the struct
	 * keeps its size. */
	__u16 l4off;
};

/* An encrypted connection ID's n bytes after its first octet, as
 * quic_route read them, for the decryption, which is a call of its own
 * (quic.h, dir_quic_decrypt_hops): w0 to w2 little-endian; lens is
 * key << 16 | n << 8 | sid_len, key its config's in quic_ids and
 * quic_keys (dir_quic_key); rot the ID's config rotation bits. In the
 * single-buffer build, th is the hops' scalar (quic.h, quic_hops_of),
 * which the decryption's frame then need not keep across its AES calls:
 * that frame is what 5.10's limit on a chain of calls has least room for. */
struct dir_quic_cid {
	__u64 w0, w1, w2;
	__u32 lens, rot;
#ifdef DIR_SINGLE_BUFFER
	__u64 th;
#endif
};

#ifdef DIR_SINGLE_BUFFER
/* The single-buffer build's global functions take no pointers (build.h):
 * the flow they work on, and the table's hash key, are passed through
 * this per-CPU scratch instead. */
struct dir_flow_scratch {
	struct flow f;
	__u8 key[16];
	struct dir_quic_cid quic;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_flow_scratch);
} flow_scratch SEC(".maps");

static __always_inline struct dir_flow_scratch *flow_scratch_get(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&flow_scratch, &zero);
}
#endif

#endif
