package service

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/director/director/loader"
)

// GLB's XDP director sends these to statsd on 127.0.0.1:statsd_port every
// 10 s (its test_director_metrics.py checks their names and tags): counts
// since the last send, DogStatsD tags, the engine tag first. Dashboards
// built on them keep working through a migration.
const statsdEvery = 10 * time.Second

// glbResults map GLB's result tags to the datapath's counters: for each
// frame, the result GLB's XDP director gives it. The program counts a
// frame it passes by what GLB would have made of it (glb_unknown_format:
// its parser cannot read it; glb_matched: what it reads is bound, as a
// first fragment to a VIP is; glb_no_matching_bind), and a frame it
// steers, or whose table or config is missing, was matched, as GLB counts
// it: Matched before any error. (A frame GLB cannot read but the
// director steers, one VLAN tag deep, is Matched: what the director did.)
var glbResults = []struct {
	tag      string
	counters []string
}{
	{"result:Matched", []string{"matched", "error_no_table", "error_no_config", "glb_matched"}},
	{"result:NoMatchingBind", []string{"glb_no_matching_bind"}},
	{"result:UnknownFormat", []string{"glb_unknown_format"}},
}

var glbErrors = []struct {
	tag      string
	counters []string
}{
	{"error:ErrorTable", []string{"error_no_table"}},
	{"error:ErrorCreatingSpace", []string{"error_adjust_head"}},
	{"error:ErrorMissingGatewayMAC", []string{"error_no_config"}},
	{"error:ErrorMissingRow", []string{"error_bounds"}},
}

// statsdLines are GLB's metrics for the counters' change from prev to cur.
func statsdLines(prev, cur map[string]uint64) []string {
	diff := func(names ...string) uint64 {
		var n uint64
		for _, c := range names {
			if cur[c] >= prev[c] {
				n += cur[c] - prev[c]
			}
		}
		return n
	}
	const engine = "glb_engine:xdp"
	count := func(name string, v uint64, tags ...string) string {
		return fmt.Sprintf("glb.director.%s:%d|c|#%s", name, v, strings.Join(append([]string{engine}, tags...), ","))
	}
	lines := []string{
		count("packets.processed", diff("processed")),
		count("packets.encapsulated", diff("encapsulated")),
		count("packets.encapsulated_bytes", diff("encapsulated_bytes")),
	}
	for _, r := range glbResults {
		lines = append(lines, count("packets.results", diff(r.counters...), r.tag))
	}
	for _, e := range glbErrors {
		lines = append(lines, count("packets.internal_errors", diff(e.counters...), e.tag))
	}
	return lines
}

// sendStatsd sends GLB's metrics to 127.0.0.1:port every interval until
// ctx ends; counters reads the datapath's global counters
// (loader.Director.GlobalCounters).
func sendStatsd(ctx context.Context, counters func() ([]uint64, error), port int, every time.Duration) error {
	conn, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	defer conn.Close()
	read := func() map[string]uint64 {
		g, err := counters()
		if err != nil {
			return nil
		}
		m := map[string]uint64{}
		for i, n := range loader.CounterNames() {
			m[n] = g[i]
		}
		return m
	}
	prev := read()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur := read()
		if cur == nil {
			continue
		}
		for _, l := range statsdLines(prev, cur) {
			conn.Write([]byte(l)) // one metric a datagram; a lost one is a lost sample
		}
		prev = cur
	}
}
