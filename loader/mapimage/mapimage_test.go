package mapimage

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// build is the tables of a config.
func build(t *testing.T, cfg string) []*table.Table {
	t.Helper()
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return tabs
}

// TestTableRoundTrip: a table read back from the image EncodeTable makes
// is the table, its counter indices, index and counter block; an image
// whose hop address disagrees with its backend is refused.
func TestTableRoundTrip(t *testing.T) {
	tabs := build(t, `{"tables": [{"name": "web", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
	  "binds": [{"ip": "10.20.0.1", "proto": "tcp", "port": 80}, {"ip": "10.20.1.0/24", "proto": "udp", "port_start": 5000, "port_end": 5999}],
	  "backends": [{"ip": "10.8.0.1", "state": "active", "healthy": true}, {"ip": "10.8.0.2", "state": "draining", "healthy": true},
	   {"ip": "10.8.0.3", "state": "active", "healthy": false, "weight": 2000, "domain": "rack-b"}]},
	 {"name": "v6", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
	  "binds": [{"ip": "fd00:20::1", "proto": "tcp", "port": 443}],
	  "backends": [{"ip": "fd00:8::1", "state": "active", "healthy": true}, {"ip": "fd00:8::2", "state": "active", "healthy": true}]}]}`)
	for i, tab := range tabs {
		stat := make([]uint8, len(tab.Backends))
		for j := range stat {
			stat[j] = uint8(len(stat) - 1 - j) // not their positions
		}
		dt, err := EncodeTable(tab, i, 7, stat, nil)
		if err != nil {
			t.Fatal(err)
		}
		lt, err := DecodeTable(dt)
		if err != nil {
			t.Fatalf("%s: %v", tab.Name, err)
		}
		if lt.Index != i || lt.StatsID != 7 || !reflect.DeepEqual(lt.Stat, stat) {
			t.Errorf("%s: index %d, block %d, counters %v; want %d, 7, %v", tab.Name, lt.Index, lt.StatsID, lt.Stat, i, stat)
		}
		got := lt.Table
		if got.Name != tab.Name || got.HashKey != tab.HashKey || !reflect.DeepEqual(got.Binds, tab.Binds) ||
			!reflect.DeepEqual(got.Rows, tab.Rows) || len(got.Backends) != len(tab.Backends) {
			t.Errorf("%s: read back as %+v", tab.Name, got)
		}
		for j, b := range got.Backends {
			w := tab.Backends[j]
			if b.IP != w.IP || b.State != w.State || b.Healthy != w.Healthy || b.W() != w.W() || b.Domain != w.Domain {
				t.Errorf("%s: backend %d read back as %+v, want %+v", tab.Name, j, b, w)
			}
		}
		if tab.Backends[0].IP.Is4() {
			dt.HopAddr[stat[0]]++
		} else {
			dt.HopAddr6[stat[0]][15]++
		}
		if _, err := DecodeTable(dt); err == nil || !strings.Contains(err.Error(), "disagrees") {
			t.Errorf("%s: a wrong hop address: %v", tab.Name, err)
		}
	}
}

// TestQUICRefusesServerIDsThatCollide: server IDs chosen so that more share
// one place than the program probes are refused before anything is
// written, naming the table; fewer are placed and found.
func TestQUICRefusesServerIDsThatCollide(t *testing.T) {
	byHome := map[uint32][]string{}
	var home uint32
	for i := 0; i < 1<<16; i++ {
		sid := []byte{byte(i >> 8), byte(i)}
		h := QUICHome(sid)
		byHome[h] = append(byHome[h], fmt.Sprintf("%x", sid))
		if len(byHome[h]) > int(abi.QUICProbes) {
			home = h
			break
		}
	}
	mk := func(ids []string) []*table.Table {
		var bs []string
		for i, id := range ids {
			bs = append(bs, fmt.Sprintf(`{"ip": "10.9.0.%d", "state": "active", "healthy": true, "server_id": "%s"}`, i+1, id))
		}
		return build(t, `{"tables": [{"name": "ok", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
		  "binds": [{"ip": "10.20.0.2", "proto": "udp", "port": 443}], "backends": [{"ip": "10.8.0.1", "state": "active", "healthy": true}]},
		 {"name": "q", "hash_key": "00112233445566778899aabbccddeeff", "seed": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
		  "quic": {"config_id": 1, "server_id_len": 2, "nonce_len": 4},
		  "binds": [{"ip": "10.20.0.1", "proto": "udp", "port": 443}], "backends": [`+strings.Join(bs, ", ")+`]}]}`)
	}
	ids := byHome[home]
	err := CheckDatapath(mk(ids))
	if err == nil || !strings.Contains(err.Error(), "tables[1]: backends[") || !strings.Contains(err.Error(), "choose other server IDs") {
		t.Fatalf("%d IDs of one home: %v", len(ids), err)
	}
	// Issue 46, item 8: refused while some are down too, for the checks
	// may bring them up (the service could then apply no health change).
	issue := []string{"00de", "017a", "0369", "0405", "06a7", "0743", "0932", "0bd4", "0c70", "0d0c"}
	for _, ids := range [][]string{ids, issue} {
		down := mk(ids)
		for k := range 2 {
			down[1].Backends[k].Healthy = false
		}
		err := CheckDatapath(down)
		if err == nil || !strings.Contains(err.Error(), "choose other server IDs") || !strings.Contains(err.Error(), "when all are up") {
			t.Errorf("%d IDs of one home, 2 of them down: %v", len(ids), err)
		}
	}
	tabs := mk(ids[:abi.QUICProbes])
	if err := CheckDatapath(tabs); err != nil {
		t.Fatalf("%d IDs of one home: %v", abi.QUICProbes, err)
	}
	stat := make([]uint8, len(tabs[1].Backends))
	for i := range stat {
		stat[i] = uint8(i)
	}
	imgs, err := EncodeQUIC(tabs[1], stat)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range tabs[1].Backends {
		if !QUICFinds(imgs[0].IDs, []byte(b.ServerID), uint8(i+1)) {
			t.Errorf("backend %d's ID %s is not found", i, b.ServerID)
		}
	}
}
