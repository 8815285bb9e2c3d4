// Package pcapfilter compiles tcpdump filter expressions with libpcap
// and matches frames against them in Go. libpcap is loaded when an
// expression is first compiled (purego, no cgo): the director builds and
// runs without it, and only a capture given an expression needs Debian's
// libpcap0.8. The compiled classic BPF program runs in golang.org/x/net's
// BPF interpreter.
package pcapfilter

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
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

// ErrNoLibpcap is Compile's error where libpcap cannot be loaded.
var ErrNoLibpcap = errors.New("a filter expression is compiled by libpcap, which is not installed (Debian: apt-get install libpcap0.8)")

func load() error {
	lib.once.Do(func() {
		var h uintptr
		var errs []string
		for _, name := range []string{"libpcap.so.0.8", "libpcap.so.1", "libpcap.so"} {
			var err error
			if h, err = purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
				break
			}
			errs = append(errs, err.Error())
		}
		if h == 0 {
			lib.err = fmt.Errorf("%w: %s", ErrNoLibpcap, strings.Join(errs, "; "))
			return
		}
		purego.RegisterLibFunc(&lib.openDead, h, "pcap_open_dead")
		purego.RegisterLibFunc(&lib.compile, h, "pcap_compile")
		purego.RegisterLibFunc(&lib.geterr, h, "pcap_geterr")
		purego.RegisterLibFunc(&lib.freecode, h, "pcap_freecode")
		purego.RegisterLibFunc(&lib.closeP, h, "pcap_close")
	})
	return lib.err
}

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
