package loader

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/lab/testenv"
)

// TestProbeKernel: on every kernel the tests run on, the programs find
// everything they use; the report names the running kernel.
func TestProbeKernel(t *testing.T) {
	testenv.Kernel(t)
	ks, err := ProbeKernel()
	if err != nil {
		t.Fatal(err)
	}
	if ks.Release == "" || ks.Release == "unknown" {
		t.Errorf("release %q", ks.Release)
	}
	if len(ks.Missing) != 0 {
		t.Errorf("kernel %s lacks %v", ks.Release, ks.Missing)
	}
}

// TestProbeFindsWhatIsMissing: the probe can fail. An XDP program calling
// a helper XDP programs may not call is reported, with the helper's
// kernel name, and a load of it is explained by that.
func TestProbeFindsWhatIsMissing(t *testing.T) {
	testenv.Kernel(t)
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"p": {
		Name: "p", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.FnSkbStoreBytes.Call(), asm.Mov.Imm(asm.R0, 2), asm.Return()},
	}}}
	missing, err := lacks(spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"helper bpf_skb_store_bytes"}; !slices.Equal(missing, want) {
		t.Fatalf("missing %v, want %v", missing, want)
	}
	_, loadErr := ebpf.NewCollection(spec)
	if loadErr == nil {
		t.Fatal("the kernel took a program calling a helper XDP lacks")
	}
	err = explainLoad(spec, loadErr)
	if !errors.Is(err, loadErr) || !strings.Contains(err.Error(), "lacks helper bpf_skb_store_bytes, which the program uses; director is tested on Linux 5.10, 6.1, 6.12, 6.18") {
		t.Errorf("explained as %v", err)
	}
}

func TestHelperName(t *testing.T) {
	for fn, want := range map[asm.BuiltinFunc]string{
		asm.FnXdpGetBuffLen: "bpf_xdp_get_buff_len", asm.FnSkcLookupTcp: "bpf_skc_lookup_tcp", asm.FnFibLookup: "bpf_fib_lookup",
	} {
		if got := helperName(fn); got != want {
			t.Errorf("%v: %s, want %s", fn, got, want)
		}
	}
}

// TestMemlockLeftAloneWhereMapsAreCharged: loading on a kernel that
// charges BPF maps to the memory cgroup (5.11 and later, every kernel the
// tests run on but 5.10) leaves RLIMIT_MEMLOCK as it was.
func TestMemlockLeftAloneWhereMapsAreCharged(t *testing.T) {
	testenv.Kernel(t)
	var before, after unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &before); err != nil {
		t.Fatal(err)
	}
	d, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("RLIMIT_MEMLOCK %+v -> %+v on a kernel that does not charge maps to it", before, after)
	}
}
