//go:build ignore

/* trafficgen: run with BPF_PROG_RUN in live-frames mode, it sends the test
 * frame out of an interface with XDP_REDIRECT, in bulk, as fast as the
 * kernel allows (the technique of xdp-trafficgen). The kernel recycles the
 * frame's page without restoring its contents, and a receiver such as the
 * director may have rewritten the frame's L2 header, so the header is
 * restored from tg_cfg on every run. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct tg_config {
	__u32 ifindex;  /* where frames go */
	__u32 l2len;    /* 14, or 18 with an 802.1Q tag */
	__u8 l2[20];    /* the frame's L2 header */
};

const struct tg_config *unused_tg_config __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_config);
} tg_cfg SEC(".maps");

SEC("xdp")
int xdp_trafficgen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct tg_config *c = bpf_map_lookup_elem(&tg_cfg, &zero);
	if (!c || data + 18 > end)
		return XDP_DROP;
	if (c->l2len == 18)
		__builtin_memcpy(data, c->l2, 18);
	else
		__builtin_memcpy(data, c->l2, 14);
	return bpf_redirect(c->ifindex, 0);
}
