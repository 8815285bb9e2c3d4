/* The two builds of each program (docs/architecture.md, "Kernels"):
 *   - the multi-buffer build (the default): for kernels with multi-buffer
 *     XDP (Linux 5.18 and up), whose programs are flagged xdp.frags and
 *     measure a frame with bpf_xdp_get_buff_len;
 *   - the single-buffer build (DIR_SINGLE_BUFFER): for 5.10 to 5.17, whose
 *     drivers hand an XDP program one buffer only (they refuse XDP at an
 *     MTU that would need more), so the frame is what data to data_end
 *     holds; and whose verifiers take no pointer arguments to global
 *     functions (5.12 does), so those find their arguments themselves
 *     (flow.h's flow_scratch).
 * The loader picks the build by probing the kernel. Both send the same
 * bytes for every frame both take. */
#ifndef DIR_BUILD_H
#define DIR_BUILD_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#ifdef DIR_SINGLE_BUFFER
#define DIR_XDP_SEC "xdp"
#else
#define DIR_XDP_SEC "xdp.frags"
#endif

/* frame_len is the frame's length in bytes, all its buffers. */
static __always_inline __u64 frame_len(struct xdp_md *ctx)
{
#ifdef DIR_SINGLE_BUFFER
	/* Subtracting the packet pointers needs CAP_PERFMON, which loading
	 * needs already. */
	return (__u64)((void *)(long)ctx->data_end - (void *)(long)ctx->data);
#else
	return bpf_xdp_get_buff_len(ctx);
#endif
}

#endif
