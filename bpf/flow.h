/* What the director program knows of a packet once parsed: its flow, and
 * the protocol numbers it looks for. */
#ifndef DIR_FLOW_H
#define DIR_FLOW_H

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
};

#endif
