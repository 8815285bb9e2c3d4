//go:build ignore

/* lab: the programs benchmarks and tests use, kept out of the production
 * object that 'director load' pins.
 *
 * xdp_trafficgen: run with BPF_PROG_RUN in live-frames mode, it sends frames
 * out of an interface with XDP_REDIRECT, in bulk, as fast as the kernel
 * allows (the technique of xdp-trafficgen). Each run writes the next of up
 * to TG_MAX_FRAMES prepared frames into the packet and trims it to that
 * frame's length, so one BPF_PROG_RUN call sends a whole capture's mix; and
 * since the kernel recycles pages without restoring them, whatever a
 * receiver wrote into a page is overwritten before it is sent again. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "aes.h"
#include "cidcrypt.h"

char LICENSE[] SEC("license") = "GPL";

/* An enum, so that bpf2go gives Go the generator's limits. */
enum tg_limit {
	TG_MAX_FRAME = 1536,  /* bytes: a 1500-byte packet with Ethernet and a VLAN tag */
	TG_MAX_FRAMES = 4096,
};

struct tg_config {
	__u32 ifindex;  /* where frames go */
	__u32 nframes;  /* frames prepared in tg_frames */
};

struct tg_frame {
	__u32 len;
	__u8 data[TG_MAX_FRAME];
};

const struct tg_config *unused_tg_config __attribute__((unused));
const struct tg_frame *unused_tg_frame __attribute__((unused));
const enum tg_limit *unused_tg_limit __attribute__((unused));

/* The generator's settings (struct tg_config: how many frames, where
 * to), one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_config);
} tg_cfg SEC(".maps");

/* The frames it sends, in turn. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_MAX_FRAMES);
	__type(key, __u32);
	__type(value, struct tg_frame);
} tg_frames SEC(".maps");

/* Which frame each CPU sends next. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} tg_next SEC(".maps");

SEC("xdp")
int xdp_trafficgen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct tg_config *c = bpf_map_lookup_elem(&tg_cfg, &zero);
	__u32 *next = bpf_map_lookup_elem(&tg_next, &zero);
	if (!c || !next || !c->nframes)
		return XDP_DROP;
	__u32 n = *next;
	*next = n + 1 >= c->nframes ? 0 : n + 1;
	struct tg_frame *f = bpf_map_lookup_elem(&tg_frames, &n);
	if (!f)
		return XDP_DROP;
	__u32 len = f->len;
	if (len < 14 || len > TG_MAX_FRAME)
		return XDP_DROP;

	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	/* The frame's length, taken before the copy. Linux 6.1: computed after
	 * it, as data + len - end, it fails the verifier on a path it cannot
	 * see is dead (pointer arithmetic on pkt_end). */
	int have = end - data;
	asm volatile("" : "+r"(have));
	for (__u32 i = 0; i < TG_MAX_FRAME / 8; i++) {
		if (i * 8 >= len)
			break;
		if (data + i * 8 + 8 > end)
			return XDP_DROP;
		*(__u64 *)(data + i * 8) = *(__u64 *)(f->data + i * 8);
	}
	if (bpf_xdp_adjust_tail(ctx, (int)len - have))
		return XDP_DROP;
	return bpf_redirect(c->ifindex, 0);
}

/* An empty program that transmits every packet back: the baseline that
 * benchmarks subtract. */
SEC("xdp")
int xdp_tx_baseline(struct xdp_md *ctx)
{
	return XDP_TX;
}

/* Passes everything: attached to the receiving end of a veth pair in tests
 * so that it runs NAPI and accepts frames the director sends with XDP_TX
 * (multi-buffer ones included, for jumbo MTUs). */
SEC("xdp.frags")
int xdp_pass_all(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* AES-128 of one block, for the tests that hold aes.h to Go's crypto/aes
 * on every kernel: the packet is an op (0 encrypt, 1 decrypt, then three
 * bytes of padding), a schedule (struct dir_aes_key's enc or dec) and the
 * block, which is replaced by its image. */
struct tg_aes_frame {
	__u32 op;
	__u32 rk[DIR_AES_ROUND_KEYS];
	__u32 block[4];
};

SEC("xdp")
int xdp_aes(struct xdp_md *ctx)
{
	struct tg_aes_frame *f = (void *)(long)ctx->data;
	__u32 rk[DIR_AES_ROUND_KEYS], s[4];

	if ((void *)(f + 1) > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	__builtin_memcpy(rk, f->rk, sizeof(rk));
	__builtin_memcpy(s, f->block, sizeof(s));
	if (f->op == 0)
		dir_aes_encrypt(rk, s);
	else
		dir_aes_decrypt(rk, s);
	__builtin_memcpy(f->block, s, sizeof(s));
	return XDP_TX;
}

/* The server ID of an encrypted QUIC-LB connection ID (cidcrypt.h), for
 * the tests that hold it to table/quiclb/cidcipher: the packet holds the
 * lengths, both schedules, the encrypted bytes, and room for the result. */
struct tg_cid_frame {
	__u32 n, sid_len;
	struct dir_aes_key key;
	__u64 w[3];
	__u64 sid[2];
};

SEC("xdp")
int xdp_cid(struct xdp_md *ctx)
{
	struct tg_cid_frame *f = (void *)(long)ctx->data;
	__u64 p0, p1;

	if ((void *)(f + 1) > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	__u32 n = f->n, sid_len = f->sid_len;
	if (n < 5 || n > 19 || sid_len < 1 || sid_len >= n)
		return XDP_ABORTED;
	struct dir_aes_work w;
	dir_cid_server_id(&f->key, &w, n, sid_len, f->w[0], f->w[1], f->w[2], &p0, &p1);
	f->sid[0] = p0;
	f->sid[1] = p1;
	return XDP_TX;
}
