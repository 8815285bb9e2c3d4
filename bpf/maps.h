/* The director program's maps: its settings, the bind maps of both
 * generations, the tables and the counters. Included once, by director.c. */
#ifndef DIR_MAPS_H
#define DIR_MAPS_H

#include "build.h"
#include "director.h"
#include "capture.h"
#include "aes.h"

/* The director config (struct dir_config: hash fields, the outer source
 * addresses and gateway MACs, the active bind generation), one entry,
 * written by the loader's SetConfig; every packet reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_config);
} config SEC(".maps");

/* Bind maps, two generations of each. The inner maps are created once, at
 * load, and only their contents change afterwards: replacing an entry of a
 * map of maps makes the kernel wait for an RCU grace period. */
struct bind_trie {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dir_bind_key);
	__type(value, struct dir_bind_val);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DIR_BIND_GENS);
	__type(key, __u32);
	__array(values, struct bind_trie);
} binds SEC(".maps");

/* The exact tables of both generations are values of one plain array:
 * a generation is only written while it is inactive, so it needs no map
 * of its own to be swapped in, and packets save an indirection. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_BIND_GENS);
	__type(key, __u32);
	__type(value, struct dir_exact_table);
} bind_exact SEC(".maps");

/* The group tables of both generations, like bind_exact. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_BIND_GENS);
	__type(key, __u32);
	__type(value, struct dir_group_table);
} bind_groups SEC(".maps");

/* The tables (struct dir_table: key, rows, hops, binds), one inner map
 * each, by slot: a bind names its table's slot. An apply writes a table
 * into a fresh inner map and swaps it into its slot, so a packet reads
 * either the old table or the new one whole (docs/architecture.md, "The
 * loader"). */
struct table_slot {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_table);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DIR_MAX_SLOTS);
	__type(key, __u32);
	__array(values, struct table_slot);
} tables SEC(".maps");

/* Each slot's history (struct dir_history: its rows' earlier primaries),
 * one inner map per slot that has ever had one, written with the slot's
 * table before the bind flip that makes it live, like the table itself.
 * Read only for a table whose hist_hops is not 0. */
struct hist_slot {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_history);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DIR_MAX_SLOTS);
	__type(key, __u32);
	__array(values, struct hist_slot);
} history SEC(".maps");

/* The global counters (enum dir_counter), per CPU: what happened to each
 * packet, and why one was passed. Summed over CPUs by 'director stats'. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_counters);
} counters SEC(".maps");

/* Packets and bytes sent to each backend as primary, per CPU: a table's
 * inner map at its stats_id, indexed by the backend's counter index from
 * the row, no lookup by address. A table's traffic is its backends' sum.
 * The loader makes a table's inner map when the table first takes its
 * stats_id, so the per-CPU arrays grow with the tables live, not with
 * DIR_MAX_TABLES. */
struct traffic_block {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DIR_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct dir_traffic);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DIR_MAX_TABLES);
	__type(key, __u32);
	__array(values, struct traffic_block);
} backend_traffic SEC(".maps");

/* QUIC-LB's counters per table and config, per CPU (director.h, struct
 * dir_quic_stats): which config's IDs a table's QUIC packets carry, and
 * how each fared. An inner map at the table's stats_id, by config
 * rotation, for the tables with QUIC-LB routing only. */
struct quic_stats_block {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DIR_QUIC_STAT_KEYS);
	__type(key, __u32);
	__type(value, struct dir_quic_stats);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, DIR_MAX_TABLES);
	__type(key, __u32);
	__array(values, struct quic_stats_block);
} quic_stats SEC(".maps");

/* Each slot's QUIC-LB configs (director.h, struct dir_quic_table), at
 * dir_quic_key(slot, config rotation), written with the slot's table;
 * read only for the configs its quic_configs names. A hash whose entries
 * are allocated when written: kernel memory for the configs tables have,
 * not for every slot's seven. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, DIR_MAX_SLOTS * DIR_QUIC_UNROUTABLE);
	__type(key, __u32);
	__type(value, struct dir_quic_table);
} quic_ids SEC(".maps");

/* Each slot's QUIC-LB keys (struct dir_aes_key: the AES-128 round keys),
 * at dir_quic_key as quic_ids, for the configs whose enc is set. A
 * secret: the loader reads it back only to check the table's fingerprint. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, DIR_MAX_SLOTS * DIR_QUIC_UNROUTABLE);
	__type(key, __u32);
	__type(value, struct dir_aes_key);
} quic_keys SEC(".maps");
/* The block and schedule of an AES encryption that dir_quic_aes (quic.h)
 * works on, per CPU: a global function that takes no pointers. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dir_aes_work);
} aes_work SEC(".maps");

/* Each slot's registry entry (struct dir_registry): the loader's, the
 * datapath never reads it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct dir_registry);
} registry SEC(".maps");

/* The MTU of each interface the program is attached to, by ifindex: kept
 * by the loader (attach, and 'director run' on the interfaces' netlink
 * events). Read by the single-buffer build only, which has no
 * bpf_check_mtu (kernels before 5.12); an interface missing is not checked. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DIR_MAX_LINKS);
	__type(key, __u32);
	__type(value, __u32);
} link_mtus SEC(".maps");

#endif
