/* QUIC-LB's encrypted connection IDs (draft-ietf-quic-load-balancers,
 * "Server ID Encoding"; Go: table/quiclb/cidcipher): the server ID a load
 * balancer reads from what follows the ID's first octet, the server ID and
 * nonce encrypted together, n bytes (5 to 19). At 16 bytes they are one
 * AES block (single pass); otherwise a four-round Feistel network whose
 * round function is AES encryption, undone in three rounds when the
 * server ID lies in the left half and four when it does not.
 *
 * Values are little-endian words of bytes: the encrypted bytes come as
 * w0 (bytes 0-7), w1 (8-15) and w2 (16-18), and the server ID is returned
 * in the same place as the plaintext's bytes 0-15 (the caller masks it to
 * its length). A Feistel half is at most 10 bytes: lo (bytes 0-7) and hi
 * (8-9). */
#ifndef DIR_CIDCRYPT_H
#define DIR_CIDCRYPT_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

#include "aes.h"

struct dir_cid_half {
	__u64 lo, hi;
};

/* dir_cid_bytes is bytes [o, o + 16) of (w0, w1, w2), o at most 9. */
static __always_inline struct dir_cid_half dir_cid_bytes(__u64 w0, __u64 w1, __u64 w2, __u32 o)
{
	if (o >= 8) {
		w0 = w1, w1 = w2, w2 = 0;
		o -= 8;
	}
	o &= 7;
	if (!o)
		return (struct dir_cid_half){w0, w1};
	return (struct dir_cid_half){w0 >> (8 * o) | w1 << (64 - 8 * o), w1 >> (8 * o) | w2 << (64 - 8 * o)};
}

/* dir_cid_mask keeps the first half bytes of h; with an odd n, also
 * clears the nibble of the middle octet that is not the half's (the left
 * half's last low nibble, the right half's first high one). */
static __always_inline void dir_cid_mask(struct dir_cid_half *h, __u32 half, int odd, int left)
{
	if (half >= 8) {
		h->hi &= (1ull << (8 * ((half - 8) & 7))) - 1;
	} else {
		h->lo &= (1ull << (8 * (half & 7))) - 1;
		h->hi = 0;
	}
	if (!odd)
		return;
	if (!left) {
		h->lo &= ~0xf0ull;
		return;
	}
	__u32 last = (half - 1) & 15;
	if (last < 8)
		h->lo &= ~(0x0full << (8 * last));
	else
		h->hi &= ~(0x0full << (8 * (last & 7)));
}

/* DIR_CID_AES(w) encrypts w->s in place with w->rk. An includer may
 * define it first: the director's is a global function (quic.h), which
 * the verifier walks once instead of once for each path that reaches a
 * round (the masks' branches made eight, and the rounds were two fifths
 * of everything it walked). */
#ifndef DIR_CID_AES
#define DIR_CID_AES(w) dir_aes_encrypt((w)->rk, (w)->s)
#endif

/* dir_cid_round is one Feistel round: other XOR the first half bytes of
 * AES(expand(n, pass, in)), masked as other's half is. w holds the
 * schedule. */
static __always_inline struct dir_cid_half dir_cid_round(struct dir_aes_work *w, __u32 n, __u32 pass, struct dir_cid_half in,
							  struct dir_cid_half other, __u32 half, int odd, int left)
{
	w->s[0] = (__u32)in.lo;
	w->s[1] = (__u32)(in.lo >> 32);
	w->s[2] = (__u32)in.hi & 0xffff;
	w->s[3] = (n & 0xff) << 16 | pass << 24;
	DIR_CID_AES(w);
	other.lo ^= (__u64)w->s[0] | (__u64)w->s[1] << 32;
	other.hi ^= w->s[2];
	dir_cid_mask(&other, half, odd, left);
	return other;
}

/* dir_cid_server_id decrypts the server ID (sid_len bytes) of an
 * encrypted connection ID into *p0 and *p1 (the plaintext's bytes 0-7 and
 * 8-15; beyond the server ID, what is left there is not the nonce). The
 * rounds work in *w. */
static __always_inline void dir_cid_server_id(const struct dir_aes_key *k, struct dir_aes_work *w, __u32 n, __u32 sid_len,
					      __u64 w0, __u64 w1, __u64 w2, __u64 *p0, __u64 *p1)
{
	if (n == 16) {
		__u32 s[4] = {(__u32)w0, (__u32)(w0 >> 32), (__u32)w1, (__u32)(w1 >> 32)};

		dir_aes_decrypt(k->dec, s);
		*p0 = (__u64)s[0] | (__u64)s[1] << 32;
		*p1 = (__u64)s[2] | (__u64)s[3] << 32;
		return;
	}
	n &= 31;
	__u32 half = (n + 1) / 2, o = n - half;
	int odd = n & 1;
	struct dir_cid_half l = {w0, w1}, r = dir_cid_bytes(w0, w1, w2, o);

	__builtin_memcpy(w->rk, k->enc, sizeof(w->rk));
	dir_cid_mask(&l, half, odd, 1);
	dir_cid_mask(&r, half, odd, 0);
	l = dir_cid_round(w, n, 4, r, l, half, odd, 1);
	r = dir_cid_round(w, n, 3, l, r, half, odd, 0);
	l = dir_cid_round(w, n, 2, r, l, half, odd, 1);
	if (sid_len <= n / 2) {
		*p0 = l.lo, *p1 = l.hi;
		return;
	}
	r = dir_cid_round(w, n, 1, l, r, half, odd, 0);
	/* The halves joined: the right one starts at byte o, its first
	 * octet's high nibble the left's last octet's (an odd n). */
	o &= 15;
	if (o < 8) {
		*p0 = l.lo | r.lo << (8 * o);
		*p1 = l.hi | r.lo >> (64 - 8 * o) | r.hi << (8 * o);
	} else {
		*p0 = l.lo;
		*p1 = l.hi | r.lo << (8 * (o & 7));
	}
}

#endif
