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

/* traffic adds a packet of bytes bytes to the traffic map's entry key
 * (a backend's packets and bytes). */
static __always_inline void traffic(void *map, __u32 key, __u64 bytes)
{
	struct dir_traffic *t = bpf_map_lookup_elem(map, &key);
	if (t) {
		t->packets++;
		t->bytes += bytes;
	}
}

#endif
