package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/director/director/table/capture"
	"github.com/director/director/table/model"
)

func main() {
	pf, _ := os.Create("/tmp/rd2.prof")
	pprof.StartCPUProfile(pf)
	defer pprof.StopCPUProfile()
	for _, parse := range []bool{false, true, false, true, false, true} {
		t0 := time.Now()
		r, err := capture.Open(os.Args[1])
		if err != nil {
			panic(err)
		}
		r.ShareFrames()
		var ps model.Parsed
		n := 0
		for {
			p, err := r.Read()
			if err == io.EOF {
				break
			}
			if parse {
				model.Parse(p.Frame, &ps)
			}
			n++
		}
		r.Close()
		d := time.Since(t0)
		fmt.Printf("parse=%v %.0f ns/pkt\n", parse, float64(d.Nanoseconds())/float64(n))
	}
}
