/* GLB's flow hash: SipHash-2-4 keyed with the table's hash_key over the
 * fields hash_fields enables. */
#ifndef DIR_SIPHASH_H
#define DIR_SIPHASH_H

#include "build.h"
#include "director.h"
#include "flow.h"

/* ---- SipHash-2-4 ---- */

#define ROTL(x, b) (__u64)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                   \
	do {                                                       \
		v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;             \
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;             \
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
	} while (0)

/* SIP_INIT sets v0..v3 from a 16-byte key, as SipHash begins. */
#define SIP_INIT(key, v0, v1, v2, v3)                                              \
	do {                                                                       \
		__u64 k0_ = *(const __u64 *)(key), k1_ = *(const __u64 *)((key) + 8); \
		v0 = k0_ ^ 0x736f6d6570736575ULL;                                  \
		v1 = k1_ ^ 0x646f72616e646f6dULL;                                  \
		v2 = k0_ ^ 0x6c7967656e657261ULL;                                  \
		v3 = k1_ ^ 0x7465646279746573ULL;                                  \
	} while (0)

/* sip_finish is SipHash-2-4's finalization, after the last block. */
static __always_inline __u64 sip_finish(__u64 v0, __u64 v1, __u64 v2, __u64 v3)
{
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* The message: at most source and destination IPv6 addresses and two
 * ports, 36 bytes, zero-padded to whole words. */
struct hashbuf {
	__u64 w[5];
};

static __always_inline __u64 siphash(const __u8 key[16], const struct hashbuf *m, __u32 len)
{
	__u64 v0, v1, v2, v3;
	SIP_INIT(key, v0, v1, v2, v3);
	__u32 full = len / 8; /* whole words before the final block */

	/* A bounded loop rather than an unrolled one: this is the hot path's
	 * biggest piece of code, and instruction cache is what it costs. */
	for (__u32 i = 0; i < 4; i++) {
		if (i >= full)
			break;
		__u64 w = m->w[i];
		v3 ^= w;
		SIPROUND;
		SIPROUND;
		v0 ^= w;
	}
	/* The final block: the tail bytes (the padding is zero) and the length. */
	__u64 w = ((__u64)len << 56);
	if (full < 5)
		w |= m->w[full];
	v3 ^= w;
	SIPROUND;
	SIPROUND;
	v0 ^= w;
	return sip_finish(v0, v1, v2, v3);
}

/* dir_hash_key is a table's hash_key, typed for dir_hash_fields: a global
 * function's pointer argument gets the size of the type it points to. */
struct dir_hash_key {
	__u8 b[16];
};

/* dir_hash_fields is GLB's flow hash: SipHash over the enabled fields,
 * concatenated in order: source address, destination address, source
 * port, destination port, all in network byte order. A global function
 * (not static, never inlined), so the verifier checks it once, on its own:
 * inlined, each of its paths (a field set and a family give the length)
 * multiplied every path after it, twice with an alternate hash; the
 * program took 527,392 instructions to verify, and takes 97,086 now. The
 * default hash (source address alone) stays inline in hash_flow, so the
 * call, and the flow it takes on the stack, cost only the other hashes. */
static __always_inline __u64 hash_fields(const __u8 *key, const struct flow *f, __u32 fields)
{
	struct hashbuf m = {};
	__u8 *b = (__u8 *)&m;
	__u32 off = 0;
	int v4 = f->family == DIR_FAMILY_IPV4;

	if (fields & DIR_HASH_SRC_ADDR) {
		if (v4) {
			__builtin_memcpy(b, f->client, 4);
			off = 4;
		} else {
			__builtin_memcpy(b, f->client, 16);
			off = 16;
		}
	}
	if (fields & DIR_HASH_DST_ADDR) {
		if (off > 16)
			return 0;
		if (v4) {
			__builtin_memcpy(b + off, f->vip, 4);
			off += 4;
		} else {
			__builtin_memcpy(b + off, f->vip, 16);
			off += 16;
		}
	}
	if (fields & DIR_HASH_SRC_PORT) {
		if (off > 32)
			return 0;
		__builtin_memcpy(b + off, &f->client_port, 2);
		off += 2;
	}
	if (fields & DIR_HASH_DST_PORT) {
		if (off > 34)
			return 0;
		__builtin_memcpy(b + off, &f->vip_port, 2);
		off += 2;
	}
	return siphash(key, &m, off);
}

#ifdef DIR_SINGLE_BUFFER
/* The single-buffer build's: the key and flow in flow_scratch. */
__noinline __u64 dir_hash_fields(__u32 fields)
{
	struct dir_flow_scratch *s = flow_scratch_get();
	if (!s)
		return 0;
	return hash_fields(s->key, &s->f, fields);
}

static __always_inline __u64 call_hash_fields(const __u8 *key, const struct flow *f, __u32 fields)
{
	struct dir_flow_scratch *s = flow_scratch_get();
	if (!s)
		return 0;
	__builtin_memcpy(s->key, key, 16);
	s->f = *f;
	return dir_hash_fields(fields);
}
#else
__noinline __u64 dir_hash_fields(const struct dir_hash_key *k, const struct flow *f, __u32 fields)
{
	if (!k || !f) /* a global function's pointers may be NULL, for the verifier */
		return 0;
	return hash_fields(k->b, f, fields);
}

#define call_hash_fields(key, f, fields) dir_hash_fields((const struct dir_hash_key *)(key), f, fields)
#endif

/* The default hash, source address only: for an IPv4 client a single
 * SipHash block, for an IPv6 one two and the length block, inlined, from
 * the state the bind's entry holds (dir_exact_entry.hash_state) or else
 * from the table's key. Everything else goes through dir_hash_fields. */
static __always_inline __u64 hash_flow(const __u8 *key, const __u64 *state, const struct flow *f, __u32 fields)
{
	if (fields != DIR_HASH_SRC_ADDR)
		return call_hash_fields(key, f, fields);
	int v4 = f->family == DIR_FAMILY_IPV4;
	__u64 v0, v1, v2, v3, w, w2 = 0;
	if (v4) {
		__u32 a;
		__builtin_memcpy(&a, f->client, 4);
		w = (__u64)a | (4ULL << 56);
	} else {
		__builtin_memcpy(&w, f->client, 8);
		__builtin_memcpy(&w2, f->client + 8, 8);
	}
	/* The first block. */
	if (state) {
		v0 = state[0];
		v1 = state[1];
		v2 = state[2];
		v3 = state[3] ^ w;
		/* The rest of the first round. */
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);
	} else {
		SIP_INIT(key, v0, v1, v2, v3);
		v3 ^= w;
		SIPROUND;
	}
	SIPROUND;
	v0 ^= w;
	if (!v4) {
		/* The second half of the address, then the length block. */
		v3 ^= w2;
		SIPROUND;
		SIPROUND;
		v0 ^= w2;
		w = 16ULL << 56;
		v3 ^= w;
		SIPROUND;
		SIPROUND;
		v0 ^= w;
	}
	return sip_finish(v0, v1, v2, v3);
}

#endif
