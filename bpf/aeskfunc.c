//go:build ignore

/* aeskfunc: a lab program that measures one AES-128 block decrypted two
 * ways, for the question of whether the director should use the kernel's
 * BPF crypto kfuncs (6.10 and up) where they exist: bpf/aes.h's T-tables,
 * which the director uses on every kernel, and bpf_crypto_decrypt with an
 * "ecb(aes)" context. Loaded only by loader's BenchmarkAESBlock: it calls
 * kfuncs, so kernels before 6.10 refuse it, which is why it is not in
 * lab.c. docs/performance.md has the numbers. */

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "aes.h"

char LICENSE[] SEC("license") = "GPL";

/* The kernel's types, as much of them as the kfuncs' signatures need:
 * the loader checks each kfunc's prototype against the kernel's BTF by
 * name and kind, so the context is a struct, not a declaration. */
struct bpf_crypto_ctx {
	int unused;
};

struct bpf_crypto_params {
	char type[14];
	__u8 reserved[2];
	char algo[128];
	__u8 key[256];
	__u32 key_len;
	__u32 authsize;
};

extern struct bpf_crypto_ctx *bpf_crypto_ctx_create(const struct bpf_crypto_params *params, __u32 params__sz,
						    int *err) __ksym;
extern void bpf_crypto_ctx_release(struct bpf_crypto_ctx *ctx) __ksym;
extern int bpf_crypto_decrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src, const struct bpf_dynptr *dst,
			      const struct bpf_dynptr *siv__nullable) __ksym;

/* The context, a referenced kernel pointer (__kptr). clang-14, the
 * pinned compiler, keeps the tag out of the BTF it writes (though with it
 * the context's struct is written whole, not as a declaration, which the
 * kfuncs' check needs), so the benchmark tags the field in the map's BTF
 * before loading. */
#define __kptr __attribute__((btf_type_tag("kptr")))

struct aes_ctx_slot {
	struct bpf_crypto_ctx __kptr *ctx;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct aes_ctx_slot);
} aes_ctx SEC(".maps");

/* The T-tables' key: its two schedules, as quic_keys holds them. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_aes_key);
} aes_key SEC(".maps");

/* Set by the benchmark before it runs aes_ctx_create: the key. */
struct bpf_crypto_params aes_params = {
	.type = "skcipher",
	.algo = "ecb(aes)",
	.key_len = 16,
};
int aes_create_err;
__u8 aes_in[16], aes_out[16];

/* aes_ctx_create makes the kfuncs' context (a sleepable program: creating
 * one allocates) and keeps it in aes_ctx. */
SEC("syscall")
int aes_ctx_create(void *unused)
{
	int err = 0;
	struct bpf_crypto_ctx *c = bpf_crypto_ctx_create(&aes_params, sizeof(aes_params), &err);
	if (!c) {
		aes_create_err = err ? err : -1;
		return 0;
	}
	__u32 zero = 0;
	struct aes_ctx_slot *s = bpf_map_lookup_elem(&aes_ctx, &zero);
	if (!s) {
		bpf_crypto_ctx_release(c);
		return 0;
	}
	c = bpf_kptr_xchg(&s->ctx, c);
	if (c)
		bpf_crypto_ctx_release(c);
	return 0;
}

/* Each XDP program decrypts the frame's first 16 bytes into aes_out, and
 * passes the frame. aes_none only copies them, the baseline. */
SEC("xdp")
int aes_none(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end)
		return XDP_ABORTED;
	__builtin_memcpy(aes_out, data, 16);
	return XDP_PASS;
}

SEC("xdp")
int aes_ttable(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end)
		return XDP_ABORTED;
	__u32 zero = 0;
	const struct dir_aes_key *k = bpf_map_lookup_elem(&aes_key, &zero);
	if (!k)
		return XDP_ABORTED;
	__u32 s[4];
	__builtin_memcpy(s, data, 16);
	dir_aes_decrypt(k->dec, s);
	__builtin_memcpy(aes_out, s, 16);
	return XDP_PASS;
}

SEC("xdp")
int aes_kfunc(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end)
		return XDP_ABORTED;
	__u32 zero = 0;
	struct aes_ctx_slot *s = bpf_map_lookup_elem(&aes_ctx, &zero);
	if (!s)
		return XDP_ABORTED;
	struct bpf_crypto_ctx *c = s->ctx;
	if (!c)
		return XDP_ABORTED;
	__builtin_memcpy(aes_in, data, 16);
	struct bpf_dynptr src, dst;
	bpf_dynptr_from_mem(aes_in, 16, 0, &src);
	bpf_dynptr_from_mem(aes_out, 16, 0, &dst);
	if (bpf_crypto_decrypt(c, &src, &dst, NULL))
		return XDP_ABORTED;
	return XDP_PASS;
}
