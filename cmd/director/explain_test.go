package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/explain"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/internal/lab/golden"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
)

// TestExplainMatchesTheKernel: what explain predicts for each packet of
// generated traffic (10,000 flows of every kind gen-capture makes: TCP,
// UDP, QUIC, echo, too big, and noise no bind matches) is what the live
// program does with it: the verdict, the counter that says why, and every
// byte it sends.
func TestExplainMatchesTheKernel(t *testing.T) {
	dir := t.TempDir()
	dc := filepath.Join(dir, "director.conf")
	// The alternate hash gives four hops; outbound_mtu too-big replies.
	if err := os.WriteFile(dc, []byte(`{"outbound_gateway_mac": "02:00:00:00:00:03", "outbound_src_ip": "192.0.2.1",
		"outbound_mtu": 1400, "forward_icmp_ping_responses": true,
		"hash_fields": {"src_addr": true, "src_port": true}, "alt_hash_fields": {"src_addr": true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cfg, dirConf string }{
		{"medium.json", dc},
		{"quic.json", cfgDir + "director.conf"},
	} {
		t.Run(strings.TrimSuffix(c.cfg, ".json"), func(t *testing.T) {
			bpffs := bpffsDir(t)
			mustRun(t, 0, "--bpffs", bpffs, "load")
			mustRun(t, 0, "--bpffs", bpffs, "--director-config", c.dirConf, "apply", cfgDir+c.cfg, "--yes")
			pcap := filepath.Join(t.TempDir(), "flows.pcap")
			mustRun(t, 0, "gen-capture", "--config", cfgDir+c.cfg, "-o", pcap, "--flows", fmt.Sprint(testenv.Reduced(10000)), "--seed", "11")
			frames := captureFrames(t, pcap)
			d, err := loader.Open(bpffs)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			dp, _, err := liveDatapath(d, "")
			if err != nil {
				t.Fatal(err)
			}
			r, err := testrun.NewReplayer(d.Prog, d.Maps.Counters)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			outs := make([]testrun.Outcome, len(frames))
			if err := r.Run(frames, outs); err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for i, f := range frames {
				x := explain.Explain(dp, f)
				k := outs[i]
				if k.NotRun {
					continue
				}
				seen[x.Action+" "+x.Counter]++
				if x.QUIC != "" {
					seen["quic "+x.QUIC]++
				}
				if x.Verdict != verdictOf(k.Verdict) || !bytes.Equal(x.Out, k.Out) || (k.Reason >= 0 && x.Counter != abi.DirectorCounterNames[k.Reason]) {
					t.Fatalf("packet %d (%s): explain says %s %s, sending\n%s\nthe kernel: %s (reason %d), sending\n%s",
						i+1, x.Packet, x.Verdict, x.Counter, x.OutPacket, verdictOf(k.Verdict), k.Reason, describeOut(k.Out))
				}
				if x.Verdict == "XDP_TX" && x.Action == "encapsulate" && (len(x.Hops) < 2 || x.Hash == nil || x.Bind == nil || x.Hops[0].State == "") {
					t.Fatalf("packet %d (%s): an encapsulated packet's explanation lacks its steering: %+v", i+1, x.Packet, x)
				}
			}
			t.Logf("%d packets of %d flows: %v", len(frames), testenv.Reduced(10000), seen)
			want := []string{"encapsulate encapsulated", "pass pass_no_bind", "pass pass_not_ip"}
			if c.cfg == "medium.json" {
				want = append(want, "icmp_too_big icmp_too_big", "encapsulate too_big_encapsulated")
			} else {
				want = append(want, "quic quic_routed", "quic quic_fallback_unknown_id")
			}
			for _, w := range want {
				if seen[w] == 0 {
					t.Errorf("the traffic has no %q packet: it does not test explain there", w)
				}
			}
		})
	}
}

func verdictOf(v uint32) string {
	switch int(v) {
	case model.XDPPass:
		return "XDP_PASS"
	case model.XDPTX:
		return "XDP_TX"
	}
	return fmt.Sprintf("XDP action %d", v)
}

func describeOut(b []byte) string {
	var x explain.Bytes = b
	h, _ := x.MarshalText()
	return string(h)
}

func captureFrames(t *testing.T, path string) [][]byte {
	t.Helper()
	r, err := pcapfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var frames [][]byte
	for {
		p, err := r.Read()
		if err != nil {
			break
		}
		frames = append(frames, p.Frame)
	}
	return frames
}

// TestExplainCommand: explain's report of a flow, a passed packet and a
// capture's packet, against golden files, and its errors.
func TestExplainCommand(t *testing.T) {
	bpffs := bpffsDir(t)
	mustRun(t, 0, "--bpffs", bpffs, "load")
	if _, errOut, code := runCmd("--bpffs", bpffs, "explain", "tcp", "198.51.100.7:40000", "10.10.10.10:80"); code != 1 || !strings.Contains(errOut, "no director config is applied") {
		t.Fatalf("before an apply: exit %d: %s", code, errOut)
	}
	mustRun(t, 0, "--bpffs", bpffs, "--director-config", cfgDir+"director.conf", "apply", cfgDir+"small.json", "--yes")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"explain-tcp", []string{"tcp", "198.51.100.7:40000", "10.10.10.10:80"}},
		{"explain-no-bind", []string{"udp", "198.51.100.7:40000", "10.10.10.10:53"}},
		{"explain-echo", []string{"icmp", "198.51.100.7", "10.10.10.10"}},
		{"explain-pcap", []string{"--pcap", capDir + "small.pcap", "--packet", "3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := mustRun(t, 0, append([]string{"--bpffs", bpffs, "explain"}, c.args...)...)
			golden.Check(t, c.name+".txt", []byte(out))
		})
	}
	out := mustRun(t, 0, "--bpffs", bpffs, "explain", "tcp", "198.51.100.7:40000", "10.10.10.10:80", "--json")
	var x explain.Director
	if err := json.Unmarshal([]byte(out), &x); err != nil || x.Bind == nil || x.Bind.Bind != "tcp 10.10.10.10:80" || len(x.Hops) != 2 {
		t.Fatalf("--json: %v: %s", err, out)
	}
	// Issue 47, item 4: a capture of what the director sent ('capture -w'
	// writes the GUE it sends) is explained as the packet it carries.
	sent := filepath.Join(t.TempDir(), "sent.pcap")
	f, err := os.Create(sent)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapfile.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	var outs struct {
		Out string `json:"out"`
	}
	json.Unmarshal([]byte(out), &outs)
	frame, err := hex.DecodeString(outs.Out)
	if err != nil || len(frame) == 0 {
		t.Fatalf("the flow's out %q: %v", outs.Out, err)
	}
	w.Write(time.Now(), frame)
	w.Flush()
	f.Close()
	stdout, errOut, code := runCmd("--bpffs", bpffs, "explain", "--pcap", sent, "--json")
	var y explain.Director
	json.Unmarshal([]byte(stdout), &outs)
	if err := json.Unmarshal([]byte(stdout), &y); code != 0 || err != nil || y.Bind == nil || y.Bind.Bind != x.Bind.Bind ||
		fmt.Sprint(y.Hops) != fmt.Sprint(x.Hops) || y.Action != x.Action || outs.Out != hex.EncodeToString(frame) ||
		!strings.Contains(errOut, "is GUE this director sent (from 192.0.2.1") {
		t.Errorf("explain of the packet the director sent: exit %d, %v\n%s\n%s\nwant the flow's:\n%s", code, err, errOut, stdout, out)
	}
	// Issue 47, item 9: the packet the director sends leaves from the
	// MAC of the interface it came in by, not a made-up one.
	mac, _ := net.ParseMAC("02:47:09:00:00:01")
	if err := testrun.InNetns(func() error {
		if err := testrun.Veth("ex0", "ex1"); err != nil {
			return err
		}
		l, err := netlink.LinkByName("ex0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetHardwareAddr(l, mac); err != nil {
			return err
		}
		out = mustRun(t, 0, "--bpffs", bpffs, "explain", "tcp", "198.51.100.7:40000", "10.10.10.10:80", "--interface", "ex0", "--json")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &x); err != nil || !strings.HasPrefix(x.OutPacket, "eth 02:47:09:00:00:01 > 02:00:00:00:00:03") {
		t.Errorf("the director's packet, in by ex0 (MAC %s): %v: %s", mac, err, x.OutPacket)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tcp", "198.51.100.7", "10.10.10.10:80"}, "a tcp flow needs both ports"},
		{[]string{"sctp", "198.51.100.7:1", "10.10.10.10:80"}, `"sctp": the protocol is tcp, udp or icmp`},
		{[]string{"tcp", "198.51.100.7:1", "2001:db8::1:80"}, "different families"},
		{[]string{"tcp", "198.51.100.7:1", "10.10.10.10:80", "--length", "70000"}, "--length 70000"},
		{[]string{"--pcap", capDir + "small.pcap", "--packet", "100000"}, "--packet 100000: the capture has"},
		{[]string{"--pcap", capDir + "small.pcap", "tcp"}, "do not go with --pcap"},
		{[]string{"tcp", "198.51.100.7:1", "10.10.10.10:80", "--interface", "no-such-if0"}, "--interface no-such-if0"},
	} {
		_, errOut, code := runCmd(append([]string{"--bpffs", bpffs, "explain"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("explain %s: exit %d, %q; want %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}
