package service

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/director/director/loader"
)

// TestStatsdAsGLBTestsIt receives the statsd datagrams on a real UDP socket
// and reads them as GLB's test_director_metrics.py does (name:value|type|#tags,
// tags compared as a tuple, the engine's first), with the same expectations.
func TestStatsdAsGLBTestsIt(t *testing.T) {
	ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	names := loader.CounterNames()
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	var round atomic.Uint64
	counters := func() ([]uint64, error) {
		r := round.Add(1)
		c := make([]uint64, len(names))
		c[index["processed"]] = 100 * r
		c[index["matched"]] = 90 * r
		c[index["encapsulated"]] = 90 * r
		c[index["pass_no_bind"]] = 10 * r
		return c, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sendStatsd(ctx, counters, ln.LocalAddr().(*net.UDPAddr).Port, 50*time.Millisecond)

	type key struct{ name, tags string }
	got := map[key]int{}
	buf := make([]byte, 4096)
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < 8 {
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			name, data, ok := strings.Cut(line, ":")
			info, tags, ok2 := strings.Cut(data, "#")
			parts := strings.SplitN(info, "|", 3)
			if !ok || !ok2 || len(parts) != 3 || parts[1] != "c" {
				t.Fatalf("not GLB's statsd line: %q", line)
			}
			v, err := strconv.Atoi(parts[0])
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			got[key{name, tags}] = v
		}
	}
	for k, want := range map[key]int{
		{"glb.director.packets.processed", "glb_engine:xdp"}:                     100,
		{"glb.director.packets.encapsulated", "glb_engine:xdp"}:                  90,
		{"glb.director.packets.results", "glb_engine:xdp,result:Matched"}:        90,
		{"glb.director.packets.results", "glb_engine:xdp,result:UnknownFormat"}:  0,
		{"glb.director.packets.results", "glb_engine:xdp,result:NoMatchingBind"}: 10,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%v: %d (sent %v), want %d a cycle", k, v, ok, want)
		}
	}
}
