/* QUIC-LB routing: the backend a UDP packet's destination connection ID
 * names (director.h, "QUIC-LB"; docs/wire.md). Included by director.c. */
#ifndef DIR_QUIC_H
#define DIR_QUIC_H

#include "build.h"
#include "director.h"
#include "maps.h"
#include "flow.h"

/* The Feistel rounds' AES, through aes_work (cidcrypt.h, DIR_CID_AES). */
__noinline int dir_quic_aes(void);
#define DIR_CID_AES(w) dir_quic_aes()
#include "cidcrypt.h"

/* The bytes of a QUIC packet the program reads: a long header's first
 * octet, version and ID length (6 bytes), or a short header's first octet;
 * then the ID's first octet and DIR_QUIC_READ bytes after it, of which the
 * server ID is the first quic_sid_len (the rest is masked off). Every real
 * QUIC packet holds them: it carries at least 20 bytes after its ID (the
 * header-protection sample). */
#define QUIC_LONG_BASE 6
#define QUIC_SHORT_BASE 1

/* dir_quic_key is where quic_ids and quic_keys keep slot's config of
 * config rotation c. */
static __always_inline __u32 dir_quic_key(__u32 slot, __u32 c)
{
	return (slot & (DIR_MAX_SLOTS - 1)) * DIR_QUIC_CONFIGS + (c & (DIR_QUIC_CONFIGS - 1));
}

/* quic_find is the counter index of the serving backend of config qt
 * whose server ID, sid_len bytes, begins (w0, w1) (little-endian words,
 * the rest masked off here), or -DIR_C_QUIC_FALLBACK_UNKNOWN_ID. */
static __always_inline int quic_find(const struct dir_quic_table *qt, __u32 sid_len, __u64 w0, __u64 w1)
{
	if (sid_len < 8) {
		w0 &= (1ull << (8 * sid_len)) - 1;
		w1 = 0;
	} else {
		w1 &= (1ull << (8 * ((sid_len - 8) & 7))) - 1;
	}
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

/* dir_quic_aes encrypts aes_work's block with its schedule. A global
 * function, so that the verifier walks the rounds once, whatever state
 * reaches each call (cidcrypt.h, DIR_CID_AES). */
__noinline int dir_quic_aes(void)
{
	__u32 zero = 0;
	struct dir_aes_work *w = bpf_map_lookup_elem(&aes_work, &zero);
	if (w)
		dir_aes_encrypt_body(w->rk, w->s);
	return 0;
}

/* quic_decrypted is quic_find of the server ID that its config's key
 * decrypts from an encrypted connection ID (cidcrypt.h). */
static __always_inline int quic_decrypted(const struct dir_quic_cid *id)
{
	__u32 lens = id->lens;
	__u32 key = lens >> 16, n = (lens >> 8) & 0xff, sid_len = lens & 0xff;
	if (n < 5 || n > 19 || sid_len < 1 || sid_len >= n)
		return -DIR_C_QUIC_FALLBACK_UNKNOWN_ID; /* the loader writes none such */
	const struct dir_aes_key *k = bpf_map_lookup_elem(&quic_keys, &key);
	__u32 zero = 0;
	struct dir_aes_work *w = bpf_map_lookup_elem(&aes_work, &zero);
	if (!k || !w)
		return -DIR_C_QUIC_FALLBACK_UNKNOWN_ID;
	__u64 p0, p1;
	dir_cid_server_id(k, w, n, sid_len, id->w0, id->w1, id->w2, &p0, &p1);
	/* The IDs looked up after the decryption, not before: a pointer
	 * kept across it is one more spill, and this function's frame is
	 * what 5.10's 512 bytes for a chain of calls (rounded to 32 each:
	 * director's 320, this one's, an AES round's 48) have least room
	 * for. */
	const struct dir_quic_table *qt = bpf_map_lookup_elem(&quic_ids, &key);
	if (!qt)
		return -DIR_C_QUIC_FALLBACK_UNKNOWN_ID;
	return quic_find(qt, sid_len, p0, p1);
}

/* What quic_route returns for an encrypted ID it has read into its
 * dir_quic_cid: above every backend's counter index. */
#define QUIC_DECRYPT 0x100

/* quic_route is the counter index of the serving backend of slot's table
 * that the destination connection ID of the UDP payload at off names, or
 * minus the fallback counter that says why there is none, or for an
 * encrypted ID, QUIC_DECRYPT with the ID in *id. The table's QUIC-LB
 * settings come as tq (quic_tq). The IP packet ends at ip_end (both
 * offsets from the frame's start). The ID's config rotation bits (its
 * first octet's top three) are read first: they name the config, which
 * gives the lengths of the rest. With encrypted IDs, the server ID is
 * decrypted from the server ID and nonce together, n = the short header's
 * ID length - 1 bytes. When quoted, the payload is that of a packet the
 * server sent, which an ICMP error quotes: a long header's ID that names
 * the server is then its source connection ID, after the destination's
 * (the ICMP error's payload ends at ip_end, so a quotation cut short falls
 * back as short). */
static __always_inline int quic_route(struct xdp_md *ctx, __u32 tq, __u32 slot, __u32 off, __u32 ip_end, __u32 quoted,
				      __u32 *rot_read, struct dir_quic_cid *id)
{
	*rot_read = DIR_QUIC_NO_ID;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* The headers before it are in the first buffer, which is never this
	 * long; the bound is for the verifier. */
	if (off > 0xfff || ip_end < off)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u32 plen = ip_end - off;
	/* The mask again, where the verifier sees it: the compiler knows
	 * the bound from above and would leave it out, and in a global
	 * function (dir_quic_hops) the verifier cannot tie that comparison
	 * to the register the pointer is made from. */
	asm volatile("" : "+r"(off));
	__u8 *q = data + (off & 0xfff);
	if ((void *)q + QUIC_SHORT_BASE + 1 + DIR_QUIC_READ > end || plen < QUIC_SHORT_BASE + 1 + DIR_QUIC_READ)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u32 base = QUIC_SHORT_BASE, cid_len = 0, is_long = q[0] & 0x80;
	if (is_long) {
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
		if (cid_len > DIR_QUIC_MAX_CID || cid_len < 1)
			return -DIR_C_QUIC_FALLBACK_CID_LEN;
	}
	/* The ID's first octet and the window the server ID is read from. */
	if (base + 1 + DIR_QUIC_READ > plen)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u8 *cid = q + (base & 0x1f);
	if ((void *)cid + 1 + DIR_QUIC_READ > end)
		return -DIR_C_QUIC_FALLBACK_SHORT;
	__u32 rot = cid[0] >> 5;
	*rot_read = rot;
	if (rot == DIR_QUIC_UNROUTABLE)
		return -DIR_C_QUIC_FALLBACK_UNROUTABLE;
	if (!(tq & (1u << rot)))
		return -DIR_C_QUIC_FALLBACK_OTHER_CONFIG;
	__u32 key = dir_quic_key(slot, rot);
	const struct dir_quic_table *qt = bpf_map_lookup_elem(&quic_ids, &key);
	if (!qt)
		return -DIR_C_QUIC_FALLBACK_OTHER_CONFIG; /* the loader writes it before the table */
	/* What follows the ID's first octet that names the server: the
	 * server ID, or encrypted, the server ID and nonce. */
	__u32 sid_len = qt->sid_len & 0x1f, n = sid_len, enc = qt->enc;
	if (!is_long)
		cid_len = qt->cid_len & 0x1f;
	if (__builtin_expect(enc, 0))
		n = (qt->cid_len - 1) & 0x1f;
	if (is_long && cid_len < 1 + n)
		return -DIR_C_QUIC_FALLBACK_CID_LEN;
	/* The whole ID. */
	__u32 need = base + (cid_len > 1 + n ? cid_len : 1 + n);
	if (need > plen || (void *)q + need > end)
		return -DIR_C_QUIC_FALLBACK_SHORT;
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
		id->w0 = w0;
		id->w1 = w1;
		id->w2 = w2;
		id->lens = key << 16 | n << 8 | sid_len;
		id->rot = rot;
		return QUIC_DECRYPT;
	}
	return quic_find(qt, sid_len, w0, w1);
}


/* quic_tq is a table's QUIC-LB settings as one scalar: its configs
 * (dir_table.quic_configs, bits 0-7) and its counter block (stats_id,
 * bits 17-22). */
static __always_inline __u32 quic_tq(const struct dir_table *t)
{
	return t->quic_configs | (t->stats_id & (DIR_MAX_TABLES - 1)) << 17;
}

/* What dir_quic_hops and dir_quic_decrypt_hops return above the hops
 * (bits 0-15): the QUIC counter to count (bits 16-23), an ICMP error
 * routed by ID (bit 24), or that the ID is still to be decrypted (bit
 * 25, dir_quic_hops only). */
#define QUIC_HOPS_ICMP (1u << 24)
#define QUIC_HOPS_DECRYPT (1u << 25)

/* quic_hops_of makes a packet's hops of the backend s its ID named (or
 * minus the fallback counter), counts it in its table's quic_stats under
 * the config rotation rot, and returns them as dir_quic_hops does. th is
 * the table's quic_tq above the packet's hops: slot << 24 | quoted << 16
 * | the row's second hop << 8 | its primary (counter indices). The named
 * backend becomes the primary and the row's primary the second hop (its
 * secondary, where the row's primary is that backend), so that the hop
 * list still holds the backend the table would have chosen. */
static __always_inline __u32 quic_hops_of(int s, __u32 rot, __u64 th)
{
	__u32 tq = th >> 32, quoted = (th >> 16) & 1;
	__u32 primary = th & 0xff, second = (th >> 8) & 0xff;
	__u32 counter = DIR_C_QUIC_ROUTED, icmp = 0;
	if (s < 0) {
		counter = -s;
	} else {
		second = (__u32)s == primary ? second : primary;
		primary = s;
		icmp = quoted;
	}
	__u32 stats = (tq >> 17) & (DIR_MAX_TABLES - 1), key = rot & (DIR_QUIC_STAT_KEYS - 1);
	void *block = bpf_map_lookup_elem(&quic_stats, &stats);
	struct dir_quic_stats *qs = block ? bpf_map_lookup_elem(block, &key) : NULL;
	if (qs) {
		qs->c[(counter - DIR_C_QUIC_ROUTED) & (DIR_QUIC_STAT_COUNTERS - 1)]++;
		if (icmp)
			qs->c[DIR_C_QUIC_ICMP_ROUTED - DIR_C_QUIC_ROUTED]++;
	}
	return (icmp ? QUIC_HOPS_ICMP : 0) | (counter & 0xff) << 16 | (second & 0xff) << 8 | (primary & 0xff);
}

/* quic_hops routes a UDP packet of a QUIC-LB table by its connection ID
 * (the UDP header at l4off; the IP packet ends at ip_end), an ICMP error
 * by the packet it quotes; th as quic_hops_of has it. An encrypted ID is
 * left in *id for dir_quic_decrypt_hops. */
static __always_inline __u32 quic_hops(struct xdp_md *ctx, struct dir_quic_cid *id, __u64 th, __u32 l4off, __u32 ip_end)
{
	__u32 rot, slot = (th >> 24) & (DIR_MAX_SLOTS - 1), quoted = (th >> 16) & 1;
	int s = quic_route(ctx, th >> 32, slot, l4off + 8, ip_end, quoted, &rot, id);
	if (s == QUIC_DECRYPT) {
#ifdef DIR_SINGLE_BUFFER
		id->th = th;
#endif
		return QUIC_HOPS_DECRYPT;
	}
	return quic_hops_of(s, rot, th);
}

/* quic_decrypt_hops is quic_hops of an encrypted ID it left in *id. */
static __always_inline __u32 quic_decrypt_hops(const struct dir_quic_cid *id, __u64 th)
{
	int s = quic_decrypted(id);
#ifdef DIR_SINGLE_BUFFER
	th = id->th; /* read after: not kept across the decryption (flow.h) */
#endif
	/* What the ID's memory holds is anything to the verifier. */
	return quic_hops_of(s < 0 ? -DIR_C_QUIC_FALLBACK_UNKNOWN_ID : s & 0xff, id->rot, th);
}

/* dir_quic_hops and dir_quic_decrypt_hops are global functions, each
 * verified once on its own: inline, the paths of a long, short, quoted
 * and encrypted header each carried on through the rest of the program,
 * which took 6.1's verifier to 79% of its million instructions. The
 * decryption is a call of its own, after the first returns, rather than
 * one the first makes: the single-buffer program's stack (320 bytes), the
 * parsing's and the decryption's (AES's rounds a call deeper) would come
 * to more than the 512 bytes a chain of calls may use. The single-buffer
 * build hands the ID over in flow_scratch (build.h: its global functions
 * take no pointers), the multi-buffer one on its caller's stack. */
#ifdef DIR_SINGLE_BUFFER
__noinline __u32 dir_quic_hops(struct xdp_md *ctx, __u64 th, __u32 l4off, __u32 ip_end)
{
	struct dir_flow_scratch *s = flow_scratch_get();
	if (!s)
		return quic_hops_of(-DIR_C_QUIC_FALLBACK_SHORT, DIR_QUIC_NO_ID, th);
	return quic_hops(ctx, &s->quic, th, l4off, ip_end);
}

__noinline __u32 dir_quic_decrypt_hops(__u64 th)
{
	struct dir_flow_scratch *s = flow_scratch_get();
	if (!s)
		return quic_hops_of(-DIR_C_QUIC_FALLBACK_UNKNOWN_ID, DIR_QUIC_NO_ID, th);
	return quic_decrypt_hops(&s->quic, 0);
}

static __always_inline __u32 call_quic_hops(struct xdp_md *ctx, __u64 th, __u32 l4off, __u32 ip_end)
{
	__u32 q = dir_quic_hops(ctx, th, l4off, ip_end);
	if (q & QUIC_HOPS_DECRYPT)
		q = dir_quic_decrypt_hops(th);
	return q;
}
#else
__noinline __u32 dir_quic_hops(struct xdp_md *ctx, struct dir_quic_cid *id, __u64 th, __u32 l4off, __u32 ip_end)
{
	if (!id) /* a global function's pointers may be NULL, for the verifier */
		return quic_hops_of(-DIR_C_QUIC_FALLBACK_SHORT, DIR_QUIC_NO_ID, th);
	return quic_hops(ctx, id, th, l4off, ip_end);
}

__noinline __u32 dir_quic_decrypt_hops(const struct dir_quic_cid *id, __u64 th)
{
	if (!id)
		return quic_hops_of(-DIR_C_QUIC_FALLBACK_UNKNOWN_ID, DIR_QUIC_NO_ID, th);
	return quic_decrypt_hops(id, th);
}

static __always_inline __u32 call_quic_hops(struct xdp_md *ctx, __u64 th, __u32 l4off, __u32 ip_end)
{
	struct dir_quic_cid id = {};
	__u32 q = dir_quic_hops(ctx, &id, th, l4off, ip_end);
	if (q & QUIC_HOPS_DECRYPT)
		q = dir_quic_decrypt_hops(&id, th);
	return q;
}
#endif

#endif
