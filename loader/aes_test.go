package loader

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"regexp"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/director/director/bpf"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/table/quiclb/cidcipher"
)

// TestAESMatchesGo: the program's AES-128 (bpf/aes.h, run through the lab
// object's xdp_aes) encrypts and decrypts as Go's crypto/aes does, with
// the schedules cidcipher.Schedule gives it, on random keys and blocks
// and on FIPS 197's example (Appendix B).
func TestAESMatchesGo(t *testing.T) {
	testenv.Kernel(t)
	progs := labPrograms(t)
	run := func(op uint32, rk [44]uint32, block []byte) []byte {
		t.Helper()
		frame := binary.LittleEndian.AppendUint32(nil, op)
		for _, w := range rk {
			frame = binary.LittleEndian.AppendUint32(frame, w)
		}
		frame = append(frame, block...)
		out := make([]byte, len(frame))
		ret, err := progs.XdpAes.Run(&ebpf.RunOptions{Data: frame, DataOut: out})
		if err != nil || ret != 3 { // XDP_TX
			t.Fatalf("xdp_aes: %d, %v", ret, err)
		}
		return out[len(out)-16:]
	}
	check := func(k [16]byte, block []byte) {
		t.Helper()
		c, err := aes.NewCipher(k[:])
		if err != nil {
			t.Fatal(err)
		}
		rk := cidcipher.Schedule(k)
		want := make([]byte, 16)
		c.Encrypt(want, block)
		if got := run(0, rk.Enc, block); !bytes.Equal(got, want) {
			t.Fatalf("key %x: encrypted %x to %x, Go to %x", k, block, got, want)
		}
		if got := run(1, rk.Dec, want); !bytes.Equal(got, block) {
			t.Fatalf("key %x: decrypted %x to %x, want %x", k, want, got, block)
		}
	}
	var fips [16]byte
	copy(fips[:], []byte{0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c})
	check(fips, []byte{0x32, 0x43, 0xf6, 0xa8, 0x88, 0x5a, 0x30, 0x8d, 0x31, 0x31, 0x98, 0xa2, 0xe0, 0x37, 0x07, 0x34})
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		var k [16]byte
		block := make([]byte, 16)
		for i := range k {
			k[i], block[i] = byte(r.Uint32()), byte(r.Uint32())
		}
		check(k, block)
	}
}

// TestCIDServerIDMatchesGo: the program's decryption of an encrypted
// connection ID's server ID (bpf/cidcrypt.h, through the lab object's
// xdp_cid) gives the server ID cidcipher encrypted, for every length the
// draft allows and every server ID length, single pass and four passes,
// three rounds and four.
func TestCIDServerIDMatchesGo(t *testing.T) {
	testenv.Kernel(t)
	progs := labPrograms(t)
	r := rand.New(rand.NewPCG(5, 6))
	for n := cidcipher.MinLen; n <= cidcipher.MaxLen; n++ {
		for sid := 1; sid < n && sid <= 15; sid++ {
			var k [16]byte
			for i := range k {
				k[i] = byte(r.Uint32())
			}
			c, err := cidcipher.New(k, sid, n-sid)
			if err != nil {
				t.Fatal(err)
			}
			rk := cidcipher.Schedule(k)
			for range 10 {
				plain := make([]byte, n)
				for i := range plain {
					plain[i] = byte(r.Uint32())
				}
				ct := make([]byte, 24)
				c.Encrypt(ct[:n], plain)
				for i := n; i < 24; i++ {
					ct[i] = byte(r.Uint32()) // what follows the ID in the packet
				}
				frame := binary.LittleEndian.AppendUint32(nil, uint32(n))
				frame = binary.LittleEndian.AppendUint32(frame, uint32(sid))
				for _, w := range rk.Enc {
					frame = binary.LittleEndian.AppendUint32(frame, w)
				}
				for _, w := range rk.Dec {
					frame = binary.LittleEndian.AppendUint32(frame, w)
				}
				frame = append(frame, ct...)
				frame = append(frame, make([]byte, 16)...)
				out := make([]byte, len(frame))
				ret, err := progs.XdpCid.Run(&ebpf.RunOptions{Data: frame, DataOut: out})
				if err != nil || ret != 3 {
					t.Fatalf("xdp_cid: %d, %v", ret, err)
				}
				if got := out[len(out)-16 : len(out)-16+sid]; !bytes.Equal(got, plain[:sid]) {
					t.Fatalf("n %d, server ID of %d: %x, want %x (ID %x)", n, sid, got, plain[:sid], ct[:n])
				}
			}
		}
	}
}

// BenchmarkCIDServerID is the program's cost of decrypting a server ID,
// per mode, as BPF_PROG_RUN times it in the kernel, less the empty
// program's (xdp_tx_baseline) on the same frame: ns/op is the kernel's.
func BenchmarkCIDServerID(b *testing.B) {
	testenv.Kernel(b)
	progs := labPrograms(b)
	for _, c := range []struct {
		name   string
		n, sid int
	}{{"single pass", 16, 8}, {"three rounds", 8, 4}, {"four rounds", 18, 12}} {
		b.Run(c.name, func(b *testing.B) {
			frame := binary.LittleEndian.AppendUint32(nil, uint32(c.n))
			frame = binary.LittleEndian.AppendUint32(frame, uint32(c.sid))
			frame = append(frame, make([]byte, 352+24+16)...)
			const repeat = 100000
			per := func(p *ebpf.Program) float64 {
				_, d, err := p.Benchmark(frame, repeat, nil)
				if err != nil {
					b.Fatal(err)
				}
				return float64(d.Nanoseconds())
			}
			var total float64
			for b.Loop() {
				total += per(progs.XdpCid) - per(progs.XdpTxBaseline)
			}
			b.ReportMetric(total/float64(b.N), "ns/op")
		})
	}
}

// labPrograms loads the lab object's programs, closed when t ends.
func labPrograms(t testing.TB) *bpf.LabPrograms {
	t.Helper()
	spec, err := xdpbuild.Lab()
	if err != nil {
		t.Fatal(err)
	}
	progs := new(bpf.LabPrograms)
	if err := spec.LoadAndAssign(progs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { progs.Close() })
	return progs
}

// BenchmarkAESBlock: one AES-128 block decrypted in XDP by bpf/aes.h's
// T-tables, which the director runs on every kernel, and by the kernel's
// bpf_crypto_decrypt kfunc (6.10 and up, an "ecb(aes)" context), against a
// program that only copies the block (bpf/aeskfunc.c). ns/run is the
// kernel's own timer over b.N runs (BPF_PROG_RUN's repeat). Each result is
// checked against Go's crypto/aes first. The kfunc's speed is that of the
// kernel's AES driver (/proc/crypto, "ecb(aes)"), so the benchmark logs it.
func BenchmarkAESBlock(b *testing.B) {
	testenv.Kernel(b)
	key := [16]byte{0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c}
	spec, err := bpf.LoadAESKfunc()
	if err != nil {
		b.Fatal(err)
	}
	// The context's field is a referenced kernel pointer: tag it, as a
	// newer compiler would from __kptr (bpf/aeskfunc.c says why).
	slot, ok := spec.Maps["aes_ctx"].Value.(*btf.Struct)
	if !ok || len(slot.Members) != 1 {
		b.Fatal("aes_ctx: not the struct aeskfunc.c declares")
	}
	ptr, ok := slot.Members[0].Type.(*btf.Pointer)
	if !ok {
		b.Fatal("aes_ctx: its field is not a pointer")
	}
	ptr.Target = &btf.TypeTag{Value: "kptr", Type: ptr.Target}
	// struct bpf_crypto_params: type[14], reserved[2], algo[128], key[256],
	// key_len, authsize.
	params := make([]byte, 14+2+128+256+4+4)
	copy(params, "skcipher")
	copy(params[16:], "ecb(aes)")
	copy(params[144:], key[:])
	binary.LittleEndian.PutUint32(params[400:], 16)
	if err := spec.Variables["aes_params"].Set(params); err != nil {
		b.Fatal(err)
	}
	var objs bpf.AESKfuncObjects
	if err := spec.LoadAndAssign(&objs, nil); errors.Is(err, ebpf.ErrNotSupported) {
		b.Skipf("this kernel has no BPF crypto kfuncs (6.10 and up, CONFIG_BPF_SYSCALL with crypto): %v", err)
	} else if err != nil {
		b.Fatal(err)
	}
	defer objs.Close()
	if _, err := objs.AesCtxCreate.Run(&ebpf.RunOptions{}); err != nil {
		b.Fatal(err)
	}
	var cerr int32
	if err := objs.AesCreateErr.Get(&cerr); err != nil {
		b.Fatal(err)
	}
	if cerr != 0 {
		b.Skipf("bpf_crypto_ctx_create(ecb(aes)): error %d: the kernel has no ecb(aes) skcipher", cerr)
	}
	rk := cidcipher.Schedule(key)
	var kv []byte
	for _, w := range append(rk.Enc[:], rk.Dec[:]...) {
		kv = binary.LittleEndian.AppendUint32(kv, w)
	}
	if err := objs.AesKey.Put(uint32(0), kv); err != nil {
		b.Fatal(err)
	}
	if d, err := os.ReadFile("/proc/crypto"); err == nil {
		if m := regexp.MustCompile(`(?m)^name\s+: ecb\(aes\)\ndriver\s+: (\S+)`).FindSubmatch(d); m != nil {
			b.Logf("the kernel's ecb(aes): %s", m[1])
		}
	}

	frame := make([]byte, 64)
	for i := range frame {
		frame[i] = byte(i*37 + 11)
	}
	c, err := aes.NewCipher(key[:])
	if err != nil {
		b.Fatal(err)
	}
	plain := make([]byte, 16)
	c.Decrypt(plain, frame[:16])
	for _, p := range []struct {
		name string
		prog *ebpf.Program
		want []byte
	}{{"copy", objs.AesNone, frame[:16]}, {"t-tables", objs.AesTtable, plain}, {"kfunc", objs.AesKfunc, plain}} {
		ret, _, err := p.prog.Test(frame)
		if err != nil || ret != 2 { // XDP_PASS
			b.Fatalf("%s: %d, %v", p.name, ret, err)
		}
		var got [16]byte
		if err := objs.AesOut.Get(&got); err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(got[:], p.want) {
			b.Fatalf("%s: decrypted %x to %x, want %x", p.name, frame[:16], got, p.want)
		}
		b.Run(p.name, func(b *testing.B) {
			_, d, err := p.prog.Benchmark(frame, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(d.Nanoseconds()), "ns/run")
		})
	}
}
