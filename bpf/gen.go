// Package bpf holds the XDP programs' C sources and what bpf2go generates
// from them: the compiled objects (embedded) and Go types and constants for
// everything the C and Go share. director.h (the datapath's types and
// limits) and gue.h (GLB's wire format) are the single source of truth;
// Go never restates them.
//
// Three programs: director (the production datapath 'director load' pins),
// backend (GLB's proxy side for backend hosts), and lab (the traffic
// generator and the baseline and pass-all programs that benchmarks and
// tests use). The first two come in two builds (build.h): the
// multi-buffer build for kernels with multi-buffer XDP (5.18 and up), and
// the single-buffer build (DirectorSingle, BackendSingle) for 5.10 to
// 5.17; the loader picks one by probing the kernel. They are compiled with -nostdinc against the headers in
// include/, so the build machine's packages cannot change them.
//
// Regenerate with `make generate`, which pins the compiler (clang-14 and
// llvm-strip-14, passed as BPF_CLANG and BPF_STRIP). The generated files are
// committed so that `go build` needs no C toolchain.
package bpf

//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" -target bpfel -no-global-types -type dir_config -type dir_table -type dir_backend -type dir_bind -type dir_row -type dir_bind_key -type dir_bind_val -type dir_counters -type dir_traffic -type dir_counter -type dir_hash_field -type dir_family -type dir_bind_kind -type dir_exact_key -type dir_exact_entry -type dir_exact_table -type dir_group_key -type dir_group_entry -type dir_port_range -type dir_group_len -type dir_group_table -type dir_limit -type dir_exact_mult -type gue_const -type glb_gue_hdr -type glb_encap -type dir_gue6_hdr -type dir_gue6_encap -type xdp_action -type dir_capture -type dir_capture_meta -type dir_capture_cpu -type dir_capture_lease -type dir_registry -type dir_quic_table -type dir_quic_entry -type dir_quic_limit Director director.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include -DDIR_SINGLE_BUFFER" -target bpfel -no-global-types -output-stem director_single DirectorSingle director.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" -target bpfel -no-global-types -type be_config -type be_counters -type be_counter Backend backend.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include -DDIR_SINGLE_BUFFER" -target bpfel -no-global-types -output-stem backend_single BackendSingle backend.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -nostdinc -I./include" -target bpfel -no-global-types -type tg_config -type tg_frame -type tg_limit Lab lab.c
