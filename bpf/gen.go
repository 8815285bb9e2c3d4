// Package bpf holds the XDP programs' C sources and what bpf2go generates
// from them: the compiled objects, embedded. The Go types and constants
// the C and Go share are generated from the objects' BTF into package abi
// (bpf/abi), which embeds nothing: director.h (the datapath's types and
// limits) and gue.h (GLB's wire format) are the single source of truth;
// Go never restates them.
//
// Four programs: director (the production datapath 'director load' pins),
// backend (GLB's proxy side for backend hosts), lab (the traffic
// generator and the baseline and pass-all programs that benchmarks and
// tests use), and aeskfunc (a benchmark of the kernel's crypto kfuncs
// against bpf/aes.h, on kernels from 6.10). The first two come in two builds (build.h): the
// multi-buffer build for kernels with multi-buffer XDP (5.18 and up), and
// the single-buffer build (DirectorSingle, BackendSingle) for 5.10 to
// 5.17; the loader picks one by probing the kernel. They are compiled with -nostdinc against the headers in
// include/, so the build machine's packages cannot change them.
//
// Regenerate with `make generate`, which pins the compiler (clang-14 and
// llvm-strip-14, passed as BPF_CLANG and BPF_STRIP). The generated files are
// committed so that `go build` needs no C toolchain.
package bpf

//go:generate go run ./internal/aesgen -o aes_tables.h
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" -target bpfel -no-global-types Director director.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include -DDIR_SINGLE_BUFFER" -target bpfel -no-global-types -output-stem director_single DirectorSingle director.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" -target bpfel -no-global-types Backend backend.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include -DDIR_SINGLE_BUFFER" -target bpfel -no-global-types -output-stem backend_single BackendSingle backend.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" -target bpfel -no-global-types -type tg_config -type tg_frame -type tg_limit Lab lab.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" -target bpfel -no-global-types AESKfunc aeskfunc.c
//go:generate go run ./internal/abigen -o abi/abi_gen.go director_bpfel.o:dir_config,dir_table,dir_history,dir_hist_row,dir_hist_ghost,dir_hist_limit,dir_backend,dir_bind,dir_row,dir_bind_key,dir_bind_val,dir_counters,dir_traffic,dir_counter,dir_hash_field,dir_family,dir_bind_kind,dir_exact_key,dir_exact_entry,dir_exact_table,dir_group_key,dir_group_entry,dir_port_range,dir_group_len,dir_group_table,dir_limit,dir_exact_mult,gue_const,glb_gue_hdr,glb_encap,dir_gue6_hdr,dir_gue6_encap,xdp_action,dir_capture,dir_capture_meta,dir_capture_cpu,dir_capture_lease,dir_registry,dir_quic_table,dir_quic_entry,dir_quic_limit,dir_quic_stats,dir_quic_stat_limit,dir_aes_key backend_bpfel.o:be_config,be_counters,be_counter,be_prefix4,be_prefix6
