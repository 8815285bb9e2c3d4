// Package bpf holds the XDP programs' C sources and what bpf2go generates
// from them: the compiled object (embedded) and Go types for every shared
// C struct. director.h is the single source of truth for those types.
//
// Regenerate with `make generate`, which pins the compiler (clang-14 and
// llvm-strip-14, passed as BPF_CLANG and BPF_STRIP). The generated files are
// committed so that `go build` needs no C toolchain.
package bpf

//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -type dir_config -type dir_table -type dir_backend -type dir_bind -type dir_row -type dir_bind_key -type dir_bind_val -type dir_counters -type dir_traffic -type dir_counter -type dir_hash_field -type dir_family -type dir_bind_kind -type dir_exact_key -type dir_exact_entry -type dir_exact_table Director director.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -type tg_config -type tg_frame Trafficgen trafficgen.c
//go:generate go tool bpf2go -cc $BPF_CLANG -strip $BPF_STRIP -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -no-global-types -type be_config -type be_counters -type be_counter Backend backend.c
