/* QUIC-LB routing: the backend a UDP packet's destination connection ID
 * names (director.h, "QUIC-LB"; docs/wire.md). Included by director.c. */
#ifndef DIR_QUIC_H
#define DIR_QUIC_H

#include "build.h"
#include "director.h"
#include "maps.h"
#include "cidcrypt.h"

/* The bytes of a QUIC packet the program reads: a long header's first
 * octet, version and ID length (6 bytes), or a short header's first octet;
 * then the ID's first octet and DIR_QUIC_READ bytes after it, of which the
 * server ID is the first quic_sid_len (the rest is masked off). Every real
 * QUIC packet holds them: it carries at least 20 bytes after its ID (the
 * header-protection sample). */
#define QUIC_LONG_BASE 6
#define QUIC_SHORT_BASE 1

/* quic_find is the counter index of the serving backend of slot whose
 * server ID, sid_len bytes, begins (w0, w1) (little-endian words, the rest
 * masked off here), or -DIR_C_QUIC_FALLBACK_UNKNOWN_ID. */
static __always_inline int quic_find(__u32 slot, __u32 sid_len, __u64 w0, __u64 w1)
{
	if (sid_len < 8) {
		w0 &= (1ull << (8 * sid_len)) - 1;
		w1 = 0;
	} else {
		w1 &= (1ull << (8 * ((sid_len - 8) & 7))) - 1;
	}
	const struct dir_quic_table *qt = bpf_map_lookup_elem(&quic_ids, &slot);
	if (!qt)
		return -DIR_C_QUIC_FALLBACK_UNKNOWN_ID;
	__u64 h = w0 * DIR_QUIC_K(0) + w1 * DIR_QUIC_K(1);
	__u32 home = h >> 32;
#pragma unroll
	for (int i = 0; i < DIR_QUIC_PROBES; i++) {
		const struct dir_quic_entry *e = &qt->e[(home + i) & (DIR_QUIC_SLOTS - 1)];
		__u64 e0 = *(const __u64 *)e->sid, e1 = *(const __u64 *)(e->sid + 8);
		if (!(e1 >> 56))
			break; /* an empty slot: the ID would have been placed by it */
		if (e0 == w0 && (e1 << 8) == (w1 << 8))
			return (int)(e1 >> 56) - 1;
	}
	return -DIR_C_QUIC_FALLBACK_UNKNOWN_ID;
}

/* dir_quic_decrypted is quic_find of the server ID that slot's key
 * decrypts from an encrypted connection ID's n bytes after its first
 * octet, (w0, w1, w2) (cidcrypt.h); lens is slot << 16 | n << 8 | sid_len.
 * A global function, verified once on its own: the AES rounds are long,
 * and inline they would be verified again on every path that reaches
 * them. */
__noinline int dir_quic_decrypted(__u32 lens, __u64 w0, __u64 w1, __u64 w2)
{
	__u32 slot = (lens >> 16) & (DIR_MAX_SLOTS - 1), n = (lens >> 8) & 0xff, sid_len = lens & 0xff;
	if (n < 5 || n > 19 || sid_len < 1 || sid_len >= n)
		return -DIR_C_QUIC_FALLBACK_UNKNOWN_ID; /* the loader writes none such */
	const struct dir_aes_key *k = bpf_map_lookup_elem(&quic_keys, &slot);
	if (!k)
		return -DIR_C_QUIC_FALLBACK_UNKNOWN_ID;
	__u64 p0, p1;
	dir_cid_server_id(k, n, sid_len, w0, w1, w2, &p0, &p1);
	return quic_find(slot, sid_len, p0, p1);
}

/* quic_route is the counter index of the serving backend of t (in slot)
 * that the destination connection ID of the UDP payload at off names, or
 * minus the fallback counter that says why there is none. The IP packet
 * ends at ip_end (both offsets from the frame's start). With encrypted
 * IDs (quic_enc), the server ID is decrypted from the server ID and nonce
 * together, n = the short header's ID length - 1 bytes. When quoted, the
 * payload is that of a packet the server sent, which an ICMP error quotes:
 * a long header's ID that names the server is then its source connection
 * ID, after the destination's (the ICMP error's payload ends at ip_end, so
 * a quotation cut short falls back as short). */
static __always_inline int quic_route(struct xdp_md *ctx, const struct dir_table *t, __u32 slot, __u32 off, __u32 ip_end,
				      __u32 quoted, __u32 *rot_read)
{
	*rot_read = DIR_QUIC_NO_ID;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* The headers before it are in the first buffer, which is never this
	 * long; the bound is for the verifier. */
	if (off > 0xfff || ip_end < off)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u32 plen = ip_end - off;
	__u8 *q = data + (off & 0xfff);
	if ((void *)q + QUIC_SHORT_BASE + 1 + DIR_QUIC_READ > end || plen < QUIC_SHORT_BASE + 1 + DIR_QUIC_READ)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u32 sid_len = t->quic_sid_len;
	__u32 base = QUIC_SHORT_BASE, cid_len = t->quic_cid & 0x1f;
	/* What follows the ID's first octet that names the server: the
	 * server ID, or encrypted, the server ID and nonce. */
	__u32 n = sid_len, enc = t->quic_enc;
	if (__builtin_expect(enc, 0))
		n = (cid_len - 1) & 0x1f;
	if (q[0] & 0x80) {
		if ((void *)q + QUIC_LONG_BASE + 1 + DIR_QUIC_READ > end || plen < QUIC_LONG_BASE + 1 + DIR_QUIC_READ)
			return -DIR_C_QUIC_FALLBACK_SHORT;
		cid_len = q[5];
		base = QUIC_LONG_BASE;
		if (quoted) {
			/* The destination ID, then the source ID's length octet
			 * and the source ID. */
			if (cid_len > DIR_QUIC_MAX_CID)
				return -DIR_C_QUIC_FALLBACK_CID_LEN;
			__u32 at = (QUIC_LONG_BASE + cid_len) & 0x1f;
			__u8 *scid_len = q + at;
			if (at + 1 > plen || (void *)(scid_len + 1) > end)
				return -DIR_C_QUIC_FALLBACK_SHORT;
			cid_len = *scid_len;
			base = at + 1;
		}
		if (cid_len > DIR_QUIC_MAX_CID || cid_len < 1 + n)
			return -DIR_C_QUIC_FALLBACK_CID_LEN;
	}
	/* The whole ID, and the window the server ID is read from. */
	__u32 need = cid_len > 1 + DIR_QUIC_READ ? cid_len : 1 + DIR_QUIC_READ;
	if (need < 1 + n)
		need = 1 + n;
	need += base;
	if (need > plen || (void *)q + need > end)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u8 *cid = q + (base & 0x1f);
	if ((void *)cid + 1 + DIR_QUIC_READ > end)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u32 rot = cid[0] >> 5;
	*rot_read = rot;
	if (rot == DIR_QUIC_UNROUTABLE)
		return -DIR_C_QUIC_FALLBACK_UNROUTABLE;
	if (rot != (__u32)(t->quic_cid >> 5))
		return -DIR_C_QUIC_FALLBACK_OTHER_CONFIG;
	__u64 w0 = *(const __u64 *)(cid + 1), w1 = *(const __u64 *)(cid + 9);
	if (__builtin_expect(enc, 0)) {
		/* Bytes 17 to n of the ID, which need covers. */
		__u64 w2 = 0;
		if (n > 16) {
			if ((void *)cid + 18 > end)
				return -DIR_C_QUIC_FALLBACK_SHORT;
			w2 = cid[17];
		}
		if (n > 17) {
			if ((void *)cid + 19 > end)
				return -DIR_C_QUIC_FALLBACK_SHORT;
			w2 |= (__u64)cid[18] << 8;
		}
		if (n > 18) {
			if ((void *)cid + 20 > end)
				return -DIR_C_QUIC_FALLBACK_SHORT;
			w2 |= (__u64)cid[19] << 16;
		}
		/* Bytes past n need no clearing: the decryption masks what it
		 * reads to n (dir_cid_mask). */
		int s = dir_quic_decrypted((slot & (DIR_MAX_SLOTS - 1)) << 16 | n << 8 | sid_len, w0, w1, w2);
		/* A global function's result is any number to the verifier. */
		return s < 0 ? -DIR_C_QUIC_FALLBACK_UNKNOWN_ID : s & 0xff;
	}
	return quic_find(slot, sid_len, w0, w1);
}

#endif
