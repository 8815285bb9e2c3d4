package replay

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/director/director/internal/capture"
	"github.com/director/director/internal/classify"
	"github.com/director/director/internal/model"
)

// modelChunk is how many packets the model replay's reader hands another
// worker at a time.
const modelChunk = 256

// RunModel replays the capture r reads (from path) through the Go model
// alone, into agg: every packet under cur and, when against is not nil,
// under against too. It needs no kernel and no privilege. read, when not
// nil, follows how many packets have been read, for progress reports. On a
// capture error it still leaves the report of what was processed in agg,
// and returns the error.
//
// The first worker reads
// the capture and parses every packet; flows are shared out among the
// other workers by a hash of their keys. Each flow is thus classified and
// counted by one worker only, with its own Classifiers and aggregator,
// and the aggregators merge without looking flows up. Reading stays on
// one CPU, with its buffers, and the other workers get only what the
// model needs: flows, sizes and places, not frames.
func RunModel(r *capture.Reader, path string, cur, against *model.Datapath, agg *Aggregator, read *atomic.Uint64) error {
	if read == nil {
		read = new(atomic.Uint64)
	}
	n := runtime.GOMAXPROCS(0)
	aggs := make([]*Aggregator, n)
	aggs[0] = agg
	for i := 1; i < n; i++ {
		aggs[i] = NewAggregator("", "", nil, agg.reasons)
	}
	// Reading is the part that cannot be shared, so the reader counts no
	// flows unless it is alone. A flow's worker is the high half of its
	// hash scaled to the others' number: no division per packet.
	others := uint64(max(n-1, 0))

	// The reader is done with a packet when it hands it on: the frame is
	// not needed, only its flow, size and place. An item is one cache
	// line: its place counts from its batch's base.
	type item struct {
		off, size uint32
		parsed    classify.Parsed
	}
	type batch struct {
		base  int
		items []item
	}
	inbox := make([]chan batch, n)
	for i := range inbox {
		inbox[i] = make(chan batch, 64)
	}
	// Batches go back to the reader once counted, rather than becoming
	// garbage: a fresh 16 KB batch every 256 packets is zeroed memory the
	// reader would wait for.
	free := make(chan []item, 64*n)
	var readErr error // the reader's; read after wg.Wait
	var wg sync.WaitGroup
	// A worker that would wait maps the capture's pages ahead of the
	// reader instead (Populate): work the reader would otherwise do, in
	// page faults.
	receive := func(c chan batch) (batch, bool) {
		for {
			select {
			case b, ok := <-c:
				return b, ok
			default:
				if !r.Populate() {
					b, ok := <-c
					return b, ok
				}
			}
		}
	}
	send := func(c chan batch, b batch) {
		for {
			select {
			case c <- b:
				return
			default:
				if !r.Populate() {
					c <- b
					return
				}
			}
		}
	}
	// worker w counts the flows it owns; worker 0 reads.
	worker := func(w int) {
		a := aggs[w]
		cur := classify.New(cur)
		var nw *classify.Classifier
		if against != nil {
			nw = classify.New(against)
		}
		var s Sample
		var res model.Result // a flow's first: FlowOf fills it once per flow
		count := func(num, size int, ps *classify.Parsed) {
			// Most packets belong to a flow already seen: their fate
			// is the flow's, and counting them is an add.
			id, _, fresh := cur.FlowOf(ps, &res)
			if !id.Valid() || !a.CountFlow(id, size) {
				if !fresh {
					res = cur.FlowResult(id)
				}
				FromModel(&s, num, size, &res, id)
				a.Add(&s)
			}
			if nw == nil || (id.Valid() && a.SeenAgainstFlow(id)) {
				return
			}
			nid, _, fresh := nw.FlowOf(ps, &res)
			if !fresh {
				res = nw.FlowResult(nid)
			}
			FromModel(&s, num, size, &res, nid)
			a.AddAgainstFlow(id, &s)
		}
		if w > 0 {
			for {
				b, ok := receive(inbox[w])
				if !ok {
					break
				}
				for i := range b.items {
					it := &b.items[i]
					count(b.base+int(it.off), int(it.size), &it.parsed)
				}
				select {
				case free <- b.items[:0]:
				default:
				}
			}
			return
		}
		// The reader.
		defer func() {
			for _, c := range inbox[1:] {
				close(c)
			}
		}()
		out := make([]batch, n)
		flush := func(to int) {
			send(inbox[to], out[to])
			select {
			case out[to].items = <-free:
			default:
				out[to].items = make([]item, 0, modelChunk)
			}
		}
		var ps classify.Parsed
		for {
			p, err := r.Next()
			if err != nil {
				if err != io.EOF {
					readErr = fmt.Errorf("%s: %w; %d packets were processed", path, err, r.Count())
				}
				break
			}
			size := len(p.Frame)
			a.Captured(size, p.Truncated)
			classify.Parse(p.Frame, &ps)
			if reason := ps.Reason(); reason != 0 {
				a.CountOther(size, reason)
			} else if to := min(n-1, 1) + int((ps.Hash()>>32)*others>>32); to == 0 {
				count(p.N, size, &ps)
			} else {
				// A batch ends when full, and before a place it cannot
				// hold (a worker given no flow for 4 billion packets).
				if len(out[to].items) > 0 && p.N-out[to].base > math.MaxUint32 {
					flush(to)
				}
				b := &out[to]
				if len(b.items) == 0 {
					b.base = p.N
				}
				b.items = append(b.items, item{uint32(p.N - b.base), uint32(size), ps})
				if len(b.items) == modelChunk {
					flush(to)
				}
			}
			if p.N%modelChunk == 0 {
				read.Store(uint64(p.N))
			}
		}
		for to := 1; to < n; to++ {
			if len(out[to].items) > 0 {
				inbox[to] <- out[to]
			}
		}
		read.Store(uint64(r.Count()))
	}
	var fault error // the reader's: the mapped capture shrank
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w > 0 {
				worker(w) // touches no frame
				return
			}
			// A mapped capture that shrinks faults: an error, not a
			// crash. The reader's deferred close still ends the others.
			fault = r.Guard(func() { worker(w) })
		}()
	}
	wg.Wait()
	for _, o := range aggs[1:] {
		agg.MergeDisjoint(o)
	}
	if fault != nil && readErr == nil {
		readErr = fmt.Errorf("%s: %w; %d packets were processed", path, fault, r.Count())
	}
	return readErr
}
