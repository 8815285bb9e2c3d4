/* Counting what happens to a frame: the global counters, and each
 * backend's traffic. */
#ifndef DIR_COUNT_H
#define DIR_COUNT_H

#include "build.h"
#include "director.h"
#include "capture.h"

static __always_inline void count(struct dir_counters *c, int i)
{
	if (i >= 0 && i < DIR_C_MAX)
		c->c[i]++;
}

/* error_pass passes a frame the program failed on (a DIR_C_ERROR_
 * counter) as it is now: rare, and what a capture is for. */
static __always_inline int error_pass(struct xdp_md *ctx, struct dir_counters *c, int reason)
{
	count(c, reason);
	return captured(ctx, XDP_PASS, reason, 0, NULL);
}

/* table_traffic adds a packet of bytes bytes to backend idx's entry in
 * the counters of table stats (backend_traffic's inner map there). One
 * key for both lookups: a second would take a stack slot of the
 * director's frame, which 5.10's limit on a chain of calls (512 bytes)
 * has no room for. */
static __always_inline void table_traffic(void *outer, __u32 stats, __u32 idx, __u64 bytes)
{
	__u32 key = stats;
	void *block = bpf_map_lookup_elem(outer, &key);
	if (!block)
		return;
	key = idx;
	struct dir_traffic *t = bpf_map_lookup_elem(block, &key);
	if (t) {
		t->packets++;
		t->bytes += bytes;
	}
}

#endif
