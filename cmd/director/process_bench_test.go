package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/director/director/internal/lab/testenv"
)

// bigConfig writes 32 tables of 256 backends, backend drain of table 5
// draining when drain >= 0.
func bigConfig(b *testing.B, path string, drain int) {
	b.Helper()
	var doc struct {
		Tables []map[string]any `json:"tables"`
	}
	for i := 0; i < 32; i++ {
		var bs []map[string]any
		for j := 0; j < 256; j++ {
			st := "active"
			if i == 5 && j == drain {
				st = "draining"
			}
			bs = append(bs, map[string]any{"ip": fmt.Sprintf("10.%d.%d.%d", 100+i, j/200, j%200+1), "state": st, "healthy": true})
		}
		doc.Tables = append(doc.Tables, map[string]any{"name": fmt.Sprint("t", i), "hash_key": fmt.Sprintf("%032x", 0xabc0+i),
			"seed": fmt.Sprintf("%032x", 0x5eed0+i), "binds": []map[string]any{{"ip": fmt.Sprintf("10.200.%d.1", i), "proto": "tcp", "port": 80}},
			"backends": bs})
	}
	data, _ := json.Marshal(doc)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWholeProcess times commands as an operator runs them, each a
// process of its own, on 32 tables of 256 backends with one backend of one
// table drained (issue 28's measure): diff, plan against a director that
// serves the undrained config, and apply of that plan (against the same
// state each time: the drain is undone between runs, not timed).
//
//	go test ./cmd/director -run '^$' -bench WholeProcess -benchtime 5x
func BenchmarkWholeProcess(b *testing.B) {
	testenv.Kernel(b)
	tmp := b.TempDir()
	old, drained := filepath.Join(tmp, "old.json"), filepath.Join(tmp, "new.json")
	bigConfig(b, old, -1)
	bigConfig(b, drained, 17)
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("director-bench-%d", os.Getpid()))
	run := func(args ...string) {
		b.Helper()
		if args[0] != "diff" && args[0] != "build" {
			args = append(args, "--bpffs", dir)
		}
		cmd := asDirector(os.Args[0], args...)
		if out, err := cmd.CombinedOutput(); err != nil && cmd.ProcessState.ExitCode() != exitChanges {
			b.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("load")
	b.Cleanup(func() { run("unload") })
	run("apply", old, "--yes", "--director-config", cfgDir+"director.conf")
	plan := filepath.Join(tmp, "plan.json")
	b.Run("diff", func(b *testing.B) {
		for b.Loop() {
			run("diff", old, drained)
		}
	})
	b.Run("plan", func(b *testing.B) {
		for b.Loop() {
			run("plan", drained, "-o", plan)
		}
	})
	b.Run("apply-plan", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			run("apply", old, "--yes")
			run("plan", drained, "-o", plan)
			b.StartTimer()
			run("apply", plan)
		}
	})
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
			run("build", drained, "-o", filepath.Join(tmp, "x.bin"))
		}
	})
}
