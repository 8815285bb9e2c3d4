// Package pcapfilter compiles tcpdump filter expressions with libpcap
// and matches frames against them in Go. libpcap is loaded when an
// expression is first compiled (purego, no cgo): the director builds and
// runs without it, and only a capture given an expression needs Debian's
// libpcap0.8. The compiled classic BPF program runs in golang.org/x/net's
// BPF interpreter.
//
// Loading a library takes the C library's dynamic loader, so a director
// that can compile expressions is a dynamically linked binary (it needs
// libc and ld.so, nothing else). Built with -tags nolibpcap ('make build
// STATIC=1') it is static and every expression is refused (static.go).
package pcapfilter

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/net/bpf"
)

// linkEthernet is DLT_EN10MB: every captured frame is Ethernet.
const linkEthernet = 1

// Filter is a compiled expression.
type Filter struct {
	Expr string
	vm   *bpf.VM
	// Program is the classic BPF program libpcap compiled.
	Program []bpf.RawInstruction
}

// program and insn are libpcap's struct bpf_program and struct bpf_insn.
type program struct {
	len   uint32
	insns *insn
}

type insn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

var lib struct {
	once     sync.Once
	err      error
	openDead func(linktype, snaplen int32) uintptr
	compile  func(p uintptr, prog *program, expr string, optimize int32, netmask uint32) int32
	geterr   func(p uintptr) string
	freecode func(prog *program)
	closeP   func(p uintptr)
	mu       sync.Mutex // libpcap's compiler is not reentrant before 1.8
}

// ErrNoLibpcap is Compile's error where libpcap cannot be loaded: it is
// not installed, or the director was built static (dlopen.go).
var ErrNoLibpcap = errors.New("a filter expression is compiled by libpcap, which is not installed (Debian: apt-get install libpcap0.8)")

// Compile compiles expr, a tcpdump filter expression, for Ethernet frames
// of up to snaplen bytes, optimised as tcpdump does.
func Compile(expr string, snaplen int) (*Filter, error) {
	if err := load(); err != nil {
		return nil, err
	}
	lib.mu.Lock()
	defer lib.mu.Unlock()
	p := lib.openDead(linkEthernet, int32(snaplen))
	if p == 0 {
		return nil, errors.New("libpcap: pcap_open_dead failed")
	}
	defer lib.closeP(p)
	var prog program
	if lib.compile(p, &prog, expr, 1, 0xffffffff /* PCAP_NETMASK_UNKNOWN */) != 0 {
		return nil, fmt.Errorf("filter %q: %s", expr, lib.geterr(p))
	}
	defer lib.freecode(&prog)
	f := &Filter{Expr: expr}
	for _, in := range unsafe.Slice(prog.insns, prog.len) {
		f.Program = append(f.Program, bpf.RawInstruction{Op: in.code, Jt: in.jt, Jf: in.jf, K: in.k})
	}
	insts, _ := bpf.Disassemble(f.Program)
	vm, err := bpf.NewVM(insts)
	if err != nil {
		return nil, fmt.Errorf("filter %q: libpcap's program does not run here: %w", expr, err)
	}
	f.vm = vm
	return f, nil
}

// Match reports whether frame, as captured, matches the expression.
func (f *Filter) Match(frame []byte) bool {
	n, err := f.vm.Run(frame)
	return err == nil && n > 0
}
