/* Live capture ('director capture', 'director backend capture'): each
 * frame the program is done with, as it leaves (encapsulated, for XDP_TX),
 * with what the program decided, sent to userspace through a perf event
 * array. While no capture runs the hook is one load and one branch at
 * each exit; a running capture is bounded by prefilters and a rate cap,
 * and frames it could not keep are counted. Included by director.c and
 * backend.c, each with maps of its own. */
#ifndef DIR_CAPTURE_H
#define DIR_CAPTURE_H

#include "build.h"

/* A capture holds a lease that its process renews: on is the time it
 * ends, in units of 1 << DIR_CAPTURE_LEASE_SHIFT ns of bpf_ktime_get_ns
 * (CLOCK_MONOTONIC), and the process sets it DIR_CAPTURE_LEASE units
 * ahead about every second. A process that dies, however it dies, stops
 * renewing, and the first frame after the lease ends turns the hook off,
 * whether or not the capture would have kept it. Exported to Go. */
enum dir_capture_lease {
	DIR_CAPTURE_LEASE_SHIFT = 30,
	DIR_CAPTURE_LEASE = 4,
};

/* The capture map's one entry, written by the capturing process. */
struct dir_capture {
	__u32 on;       /* 0: no capture runs; all the datapath reads then. Else the lease's end */
	__u32 actions;  /* 1 << the XDP action, for each captured */
	__u32 reasons;  /* 0: any; else 1 << each counter (a pass reason, encapsulated...) captured */
	__u32 table;    /* 0: any; 1 + the slot of the only table captured */
	__u32 family;   /* the primary to capture: 0 any, else its enum dir_family */
	__u8 backend[16];
	__u32 snaplen;  /* bytes of each frame kept */
	__u32 rate;     /* frames a second each CPU keeps at most; 0: no cap */
};

/* What precedes each frame in a capture event. */
struct dir_capture_meta {
	__u64 ktime;    /* bpf_ktime_get_ns */
	__u32 action;   /* the XDP action */
	__u32 reason;   /* the counter the frame was counted under (a pass reason, encapsulated...) */
	__u32 table;    /* 1 + the table's slot; 0: none */
	__u32 row;
	__u32 ifindex;
	__u32 len;      /* the frame's length as it left */
	__u32 cap_len;  /* of it, the bytes that follow */
	__u32 quic;     /* a packet of a table with QUIC-LB routing: the QUIC counter it was counted under; else 0 */
};

/* Each CPU's rate window and what the capture could not keep. */
struct dir_capture_cpu {
	__u64 window;   /* the window's start, ns */
	__u64 kept;     /* frames kept in it */
	__u64 limited;  /* frames over the rate cap, since the capture began */
	__u64 failed;   /* frames the event buffer refused */
};

/* The setting is a global in a section of its own, so that the hook reads
 * it with one load from an address the verifier fixes (a direct map value)
 * rather than a map lookup (thirteen instructions with the key's store and
 * the bounds check). Userspace sees the section as the map "capture": the
 * loader renames it (bpf/capture.go), and it has the layout of the map it
 * replaced, so pins made by an older build are adopted. */
struct dir_capture capture_setting SEC(".data.capture");

/* Where captured frames go: one perf buffer per CPU, which the capturing
 * process opens from the pin (its buffers go with it). */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} capture_events SEC(".maps");

/* Each CPU's rate window and what it could not keep (struct
 * dir_capture_cpu), read when a capture ends. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_capture_cpu);
} capture_cpu SEC(".maps");

#define DIR_CAPTURE_MAX_SNAPLEN 0xffff

/* capture_frame sends the frame to the capture, if its prefilters take
 * it and the rate cap allows. kind is the XDP action above the counter
 * the frame was counted under; at the table (1 + its slot) above the row;
 * primary the frame's primary hop (16 bytes, IPv4 in the first 4) or
 * NULL: five arguments at most. Out of line: the datapath's paths only
 * test cap->on. */
static __noinline int capture_frame(struct xdp_md *ctx, struct dir_capture *cap, __u32 kind, __u32 at, const __u8 *primary)
{
	__u64 now = bpf_ktime_get_ns();
	if (now >> DIR_CAPTURE_LEASE_SHIFT > cap->on) {
		cap->on = 0; /* the lease ran out: the capturing process is gone */
		return 0;
	}
	__u32 action = kind >> 8, reason = kind & 0xff;
	if (!(cap->actions & (1u << (action & 31))))
		return 0;
	if (cap->reasons && !(cap->reasons & (1u << (reason & 31))))
		return 0;
	if (cap->table && cap->table != ((at >> 16) & 0xff))
		return 0;
	if (cap->family) {
		if (!primary)
			return 0;
		if (*(const __u32 *)primary != *(const __u32 *)cap->backend)
			return 0;
		if (cap->family == 2 /* enum dir_family: IPv6 */ && (*(const __u32 *)(primary + 4) != *(const __u32 *)(cap->backend + 4) ||
						       *(const __u64 *)(primary + 8) != *(const __u64 *)(cap->backend + 8)))
			return 0;
	}
	__u32 zero = 0;
	struct dir_capture_cpu *cpu = bpf_map_lookup_elem(&capture_cpu, &zero);
	if (!cpu)
		return 0;
	if (cap->rate) {
		if (now - cpu->window >= 1000000000ull) { /* a new one-second window */
			cpu->window = now;
			cpu->kept = 0;
		}
		if (cpu->kept >= cap->rate) {
			cpu->limited++;
			return 0;
		}
		cpu->kept++;
	}
	__u64 len = frame_len(ctx);
	__u64 cap_len = len < cap->snaplen ? len : cap->snaplen;
	cap_len &= DIR_CAPTURE_MAX_SNAPLEN;
	struct dir_capture_meta m = {
		.ktime = now, .action = action, .reason = reason, .table = (at >> 16) & 0xff, .row = at & 0xffff,
		.ifindex = ctx->ingress_ifindex, .len = len, .cap_len = cap_len, .quic = at >> 24,
	};
	long r = bpf_perf_event_output(ctx, &capture_events, BPF_F_CURRENT_CPU | cap_len << 32, &m, sizeof(m));
	if (r == -2 /* ENOENT: no reader on this CPU, so its process is gone */)
		cap->on = 0;
	else if (r)
		cpu->failed++;
	return 0;
}

/* captured is the hook at each of a program's exits: action, for the
 * frame as it is now. */
static __always_inline int captured(struct xdp_md *ctx, int action, __u32 reason, __u32 at, const __u8 *primary)
{
	if (__builtin_expect(capture_setting.on, 0))
		capture_frame(ctx, &capture_setting, (__u32)action << 8 | (reason & 0xff), at, primary);
	return action;
}

#endif
