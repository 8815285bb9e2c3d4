/* Finding a flow's table: the exact table, the group table, the trie
 * (director.h describes each). */
#ifndef DIR_BIND_H
#define DIR_BIND_H

#include <bpf/bpf_endian.h>
#include "build.h"
#include "director.h"
#include "flow.h"
#include "maps.h"

/* exact_hash: see director.h. Words are read in host order, as the Go side
 * does. The five products are independent, so the hash costs about one
 * multiplication's latency rather than five in a row. */
static __always_inline __u32 exact_hash(__u32 w0, __u32 w1, __u32 w2, __u32 w3, __u32 w4)
{
	__u64 h = (__u64)w0 * DIR_EXACT_K(0) + (__u64)w1 * DIR_EXACT_K(1) + (__u64)w2 * DIR_EXACT_K(2) +
		  (__u64)w3 * DIR_EXACT_K(3) + (__u64)w4 * DIR_EXACT_K(4);
	return (__u32)(h >> 32) ^ (__u32)h;
}

/* probe_exact looks for the key w0..w4 from home index h. Only the first
 * nwords words are compared: the caller passes a constant, 2 for IPv4
 * (the family is in the first word, and an IPv4 key's last three are
 * zero, so two words identify it) or 5. */
static __always_inline int probe_exact(struct dir_exact_table *et, __u32 h, __u32 w0, __u32 w1, __u32 w2, __u32 w3,
				       __u32 w4, int nwords, struct dir_counters *c, const __u64 **state)
{
#pragma unroll
	for (int i = 0; i < DIR_EXACT_PROBES; i++) {
		struct dir_exact_entry *e = &et->e[(h + i) & (DIR_EXACT_SLOTS - 1)];
		if (!e->slot_plus1)
			return -1;
		__u32 *ew = (__u32 *)&e->key;
		if (ew[0] == w0 && ew[1] == w1 && (nwords == 2 || (ew[2] == w2 && ew[3] == w3 && ew[4] == w4))) {
			c->c[DIR_C_BIND_FAST]++;
			*state = e->hash_state;
			return e->slot_plus1 - 1;
		}
	}
	return -1;
}

/* lookup_exact returns the table slot for a flow, or -1, and the hash
 * state of its table. The key's words are built in registers: written to
 * the stack as bytes and read back as words, they would miss store
 * forwarding. */
static __always_inline int lookup_exact(struct dir_exact_table *et, const struct flow *f, struct dir_counters *c,
					const __u64 **state)
{
	__u32 w0 = f->proto | (__u32)f->family << 8 | (__u32)f->vip_port << 16;
	const __u32 *a = (const __u32 *)f->vip;
	if (f->family == DIR_FAMILY_IPV4)
		/* The other words are zero and add nothing to the hash. */
		return probe_exact(et, exact_hash(w0, a[0], 0, 0, 0), w0, a[0], 0, 0, 0, 2, c, state);
	return probe_exact(et, exact_hash(w0, a[0], a[1], a[2], a[3]), w0, a[0], a[1], a[2], a[3], 5, c, state);
}

/* The group path is one global function: the verifier checks it once, on
 * its own, rather than at every use, which keeps the program's load time
 * (and replay's start-up) what it was before it. It returns -1 for no
 * bind, -2 when the trie must answer, or where the match is: GROUP_IN_ENTRY
 * | the entry (its range0, and its own hash state), or else the index of
 * the range in dir_group_table.r (and the state is its slot's). Where, not
 * what: the caller's hash state then waits for the probe's hash alone,
 * not for a load of the slot as well. */
#define GROUP_IN_ENTRY (1u << 16)
_Static_assert(DIR_GROUP_SLOTS <= GROUP_IN_ENTRY && DIR_GROUP_RANGES <= GROUP_IN_ENTRY, "GROUP_IN_ENTRY is no index");

static __always_inline int group_match(struct dir_group_entry *e, __u32 idx, __u16 port, struct dir_group_table *gt)
{
	if (port >= e->range0.lo && port <= e->range0.hi)
		return GROUP_IN_ENTRY | idx;
	__u32 first = e->first, more = e->count - 1;
	/* A bounded loop, which the verifier follows. */
	for (__u32 j = 0; j < DIR_GROUP_SCAN - 1 && j < more; j++) {
		__u32 ri = (first + j) & (DIR_GROUP_RANGES - 1);
		struct dir_port_range *r = &gt->r[ri];
		if (port >= r->lo && port <= r->hi)
			return ri;
	}
	/* The longest prefix decides: no range, no bind. */
	return -1;
}

/* probe_group looks for the group of key w0..w4: its answer, -3 when
 * there is none, or -2 (ask the trie) when its probes are all full: a group
 * that did not fit may be the key's. v4, a constant at each use, says an
 * IPv4 key: its last three words are zero, so they add nothing to the hash
 * and need no comparing (the family is in w0), as in probe_exact. */
static __always_inline int probe_group(struct dir_group_table *gt, __u32 w0, __u32 m0, __u32 m1, __u32 m2, __u32 m3,
				       __u16 port, int v4)
{
	__u32 h = v4 ? exact_hash(w0, m0, 0, 0, 0) : exact_hash(w0, m0, m1, m2, m3);
#pragma unroll
	for (int i = 0; i < DIR_GROUP_PROBES; i++) {
		__u32 idx = (h + i) & (DIR_GROUP_SLOTS - 1);
		struct dir_group_entry *e = &gt->e[idx];
		if (!e->count)
			return -3;
		__u32 *ew = (__u32 *)&e->key;
		if (ew[0] == w0 && ew[1] == m0 && (v4 || (ew[2] == m1 && ew[3] == m2 && ew[4] == m3)))
			return e->trie ? -2 : group_match(e, idx, port, gt);
	}
	return -2;
}

/* probe_len probes the group of the flow's address at the family's li-th
 * prefix length; v4 (a constant) says the family is IPv4. */
static __always_inline int probe_len(struct dir_group_table *gt, const struct flow *f, int v4, int li)
{
	const __u32 *a = (const __u32 *)f->vip;
	__u16 port = bpf_ntohs(f->vip_port);
	struct dir_group_len *l = &gt->lens[v4 ? 0 : 1][li];
	__u32 w0 = f->proto | (__u32)f->family << 8 | (__u32)l->plen << 16;
	if (v4)
		return probe_group(gt, w0, a[0] & l->mask[0], 0, 0, 0, port, 1);
	return probe_group(gt, w0, a[0] & l->mask[0], a[1] & l->mask[1], a[2] & l->mask[2], a[3] & l->mask[3], port, 0);
}

/* lookup_lens tries the family's n prefix lengths, longest first, by hand:
 * clang will not unroll a loop around the probes' own unrolled loops. */
static __always_inline int lookup_lens(struct dir_group_table *gt, const struct flow *f, int v4, __u32 n)
{
	int r;
	_Static_assert(DIR_GROUP_LENS == 4, "one try per length");
	if (n == 0 || (r = probe_len(gt, f, v4, 0)) != -3)
		return n == 0 ? -1 : r;
	if (n == 1 || (r = probe_len(gt, f, v4, 1)) != -3)
		return n == 1 ? -1 : r;
	if (n == 2 || (r = probe_len(gt, f, v4, 2)) != -3)
		return n == 2 ? -1 : r;
	if (n == 3 || (r = probe_len(gt, f, v4, 3)) != -3)
		return n == 3 ? -1 : r;
	return -1;
}

static __always_inline int group_lookup(struct dir_group_table *gt, const struct flow *f)
{
	if (!gt->ready)
		return -2;
	int fi = f->family == DIR_FAMILY_IPV6;
	__u32 n = gt->nlens[fi];
	if (n == DIR_GROUP_TRIE)
		return -2;
	if (!fi)
		return lookup_lens(gt, f, 1, n);
	return lookup_lens(gt, f, 0, n);
}

/* dir_group_lookup is a global function, verified once (siphash.h says
 * why); in the single-buffer build it finds generation gen's group table
 * itself and the flow in flow_scratch (build.h). */
#ifdef DIR_SINGLE_BUFFER
__noinline int dir_group_lookup(__u32 gen)
{
	gen &= DIR_BIND_GENS - 1;
	struct dir_group_table *gt = bpf_map_lookup_elem(&bind_groups, &gen);
	struct dir_flow_scratch *s = flow_scratch_get();
	if (!gt || !s)
		return -2;
	return group_lookup(gt, &s->f);
}

static __always_inline int call_group_lookup(struct dir_group_table *gt, const struct flow *f, __u32 gen)
{
	struct dir_flow_scratch *s = flow_scratch_get();
	if (!s)
		return -2;
	s->f = *f;
	return dir_group_lookup(gen);
}
#else
__noinline int dir_group_lookup(struct dir_group_table *gt, const struct flow *f)
{
	if (!gt || !f)
		return -2;
	return group_lookup(gt, f);
}

#define call_group_lookup(gt, f, gen) dir_group_lookup(gt, f)
#endif

/* lookup_groups returns the table slot for a flow and its hash state, -1
 * for no bind, or -2 when the trie must answer. */
static __always_inline int lookup_groups(struct dir_group_table *gt, const struct flow *f, struct dir_counters *c,
					 const __u64 **state, __u32 gen)
{
	int r = call_group_lookup(gt, f, gen);
	if (r < 0)
		return r;
	__u32 slot;
	if (r & GROUP_IN_ENTRY) {
		struct dir_group_entry *e = &gt->e[r & (DIR_GROUP_SLOTS - 1)];
		slot = e->range0.slot & (DIR_MAX_SLOTS - 1);
		*state = e->state;
	} else {
		slot = gt->r[r & (DIR_GROUP_RANGES - 1)].slot & (DIR_MAX_SLOTS - 1);
		*state = gt->state[slot];
	}
	c->c[DIR_C_BIND_GROUP]++;
	return slot;
}

static __always_inline int lookup_trie(void *trie, const struct flow *f)
{
	struct dir_bind_key k = {};
	k.prefixlen = 8 * (1 + sizeof(k.data));
	k.kind = DIR_BIND_ADDR;
	k.data[0] = f->proto;
	k.data[1] = f->family;
	__builtin_memcpy(&k.data[2], f->vip, 16);
	struct dir_bind_val *g = bpf_map_lookup_elem(trie, &k);
	if (!g)
		return -1;
	__be32 group = bpf_htonl(g->id);
	__builtin_memset(&k.data, 0, sizeof(k.data));
	k.kind = DIR_BIND_PORT;
	__builtin_memcpy(&k.data[0], &group, 4);
	__builtin_memcpy(&k.data[4], &f->vip_port, 2);
	struct dir_bind_val *slot = bpf_map_lookup_elem(trie, &k);
	if (!slot)
		return -1;
	return slot->id;
}

/* lookup_bind returns the table slot for a flow, or -1. When the exact
 * table answers, *state is its table's hash state; else it is untouched. */
static __always_inline int lookup_bind(const struct flow *f, struct dir_counters *c, __u32 gen, const __u64 **state)
{
	gen &= DIR_BIND_GENS - 1;
	struct dir_exact_table *et = bpf_map_lookup_elem(&bind_exact, &gen);
	if (et) {
		int slot = lookup_exact(et, f, c, state);
		if (slot >= 0)
			return slot;
	}
	struct dir_group_table *gt = bpf_map_lookup_elem(&bind_groups, &gen);
	if (gt) {
		int slot = lookup_groups(gt, f, c, state, gen);
		if (slot != -2)
			return slot;
	}
	void *trie = bpf_map_lookup_elem(&binds, &gen);
	if (!trie)
		return -1;
	return lookup_trie(trie, f);
}

#endif
