package replay

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/director/director/internal/datapath/classify"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/format/pcapfile"
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
// The first worker reads the capture and parses every packet; flows are
// shared out among the other workers by a hash of their keys. Each flow is
// thus classified and counted by one worker only, with its own
// Classifiers and aggregator, and the aggregators merge without looking
// flows up. Reading stays on one CPU, with its buffers, and the other
// workers get only what the model needs: flows, sizes and places, not
// frames.
func RunModel(r *pcapfile.Reader, path string, cur, against *model.Datapath, agg *Aggregator, read *atomic.Uint64) error {
	if read == nil {
		read = new(atomic.Uint64)
	}
	if hasQUIC(cur) || hasQUIC(against) {
		return runModelPackets(r, path, cur, against, agg, read)
	}
	n := runtime.GOMAXPROCS(0)
	m := &modelRun{r: r, path: path, cur: cur, against: against, read: read,
		aggs:  make([]*Aggregator, n),
		inbox: make([]chan batch[item], n),
		// Batches go back to the reader once counted, rather than
		// becoming garbage: a fresh 16 KB batch every 256 packets is
		// zeroed memory the reader would wait for.
		free: make(chan []item, 64*n),
	}
	m.aggs[0] = agg
	for i := 1; i < n; i++ {
		m.aggs[i] = NewAggregator("", "", nil, agg.reasons)
	}
	for i := range m.inbox {
		m.inbox[i] = make(chan batch[item], 64)
	}
	return m.run()
}

// modelRun is one model replay: a reader (worker 0) and the workers that
// own the flows.
type modelRun struct {
	r            *pcapfile.Reader
	path         string
	cur, against *model.Datapath
	read         *atomic.Uint64
	aggs         []*Aggregator // one per worker; aggs[0] is the caller's
	inbox        []chan batch[item]
	free         chan []item
	readErr      error // the reader's; read after the workers are done
}

// item is what the reader hands on of a packet: not the frame, only its
// flow, size and place. It is one cache line: its place counts from its
// batch's base.
type item struct {
	off, size uint32
	parsed    classify.Parsed
}

func (m *modelRun) run() error {
	var wg sync.WaitGroup
	var fault error // the reader's: the mapped capture shrank
	for w := range m.aggs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w > 0 {
				m.work(w) // touches no frame
				return
			}
			// A mapped capture that shrinks faults: an error, not a
			// crash. The reader's deferred close still ends the others.
			fault = m.r.Guard(m.readAll)
		}()
	}
	wg.Wait()
	agg := m.aggs[0]
	for _, o := range m.aggs[1:] {
		agg.MergeDisjoint(o)
	}
	if fault != nil && m.readErr == nil {
		m.readErr = fmt.Errorf("%s: %w; %d packets were processed", m.path, fault, m.r.Count())
	}
	return m.readErr
}

// receive takes the next batch from c, and send hands b on. A worker that
// would wait maps the capture's pages ahead of the reader instead
// (Populate): work the reader would otherwise do, in page faults.
func (m *modelRun) receive(c chan batch[item]) (batch[item], bool) {
	for {
		select {
		case b, ok := <-c:
			return b, ok
		default:
			if !m.r.Populate() {
				b, ok := <-c
				return b, ok
			}
		}
	}
}

func (m *modelRun) send(c chan batch[item], b batch[item]) {
	for {
		select {
		case c <- b:
			return
		default:
			if !m.r.Populate() {
				c <- b
				return
			}
		}
	}
}

// work is worker w (w > 0): it counts the flows the reader hands it.
func (m *modelRun) work(w int) {
	c := m.counter(w)
	for {
		b, ok := m.receive(m.inbox[w])
		if !ok {
			return
		}
		for i := range b.items {
			it := &b.items[i]
			c.count(b.base+int(it.off), int(it.size), &it.parsed)
		}
		select {
		case m.free <- b.items[:0]:
		default:
		}
	}
}

// readAll is worker 0: it reads and parses every packet, counts what fails
// to parse and, alone, every flow; with others, it hands each flow to the
// worker that owns it.
func (m *modelRun) readAll() {
	n := len(m.aggs)
	a, c := m.aggs[0], m.counter(0)
	defer func() {
		for _, c := range m.inbox[1:] {
			close(c)
		}
	}()
	// Reading is the part that cannot be shared, so the reader counts no
	// flows unless it is alone. A flow's worker is the high half of its
	// hash scaled to the others' number: no division per packet.
	others := uint64(max(n-1, 0))
	out := make([]batch[item], n)
	flush := func(to int) {
		m.send(m.inbox[to], out[to])
		select {
		case out[to].items = <-m.free:
		default:
			out[to].items = make([]item, 0, modelChunk)
		}
	}
	var ps classify.Parsed
	for {
		p, err := m.r.Next()
		if err != nil {
			if err != io.EOF {
				m.readErr = fmt.Errorf("%s: %w; %d packets were processed", m.path, err, m.r.Count())
			}
			break
		}
		size := len(p.Frame)
		a.Captured(size, p.Truncated)
		classify.Parse(p.Frame, &ps)
		if reason := ps.Reason(); reason != 0 {
			a.CountOther(size, reason)
		} else if to := min(n-1, 1) + int((ps.Hash()>>32)*others>>32); to == 0 {
			c.count(p.N, size, &ps)
		} else {
			// A batch ends when full, and before a place it cannot hold
			// (a worker given no flow for 4 billion packets).
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
			m.read.Store(uint64(p.N))
		}
	}
	for to := 1; to < n; to++ {
		if len(out[to].items) > 0 {
			m.inbox[to] <- out[to]
		}
	}
	m.read.Store(uint64(m.r.Count()))
}

// flowCounter is a worker's own: its aggregator and its Classifiers.
type flowCounter struct {
	a       *Aggregator
	cur, nw *classify.Classifier
	s       Sample
	res     model.Result // a flow's first: FlowOf fills it once per flow
}

func (m *modelRun) counter(w int) *flowCounter {
	c := &flowCounter{a: m.aggs[w], cur: classify.New(m.cur)}
	if m.against != nil {
		c.nw = classify.New(m.against)
	}
	return c
}

// count counts one parsed packet under both configs.
func (c *flowCounter) count(num, size int, ps *classify.Parsed) {
	// Most packets belong to a flow already seen: their fate is the
	// flow's, and counting them is an add.
	id, _, fresh := c.cur.FlowOf(ps, &c.res)
	if !id.Valid() || !c.a.CountFlow(id, size) {
		if !fresh {
			c.res = c.cur.FlowResult(id)
		}
		FromModel(&c.s, num, size, &c.res, id)
		c.a.Add(&c.s)
	}
	if c.nw == nil || (id.Valid() && c.a.SeenAgainstFlow(id)) {
		return
	}
	nid, _, fresh := c.nw.FlowOf(ps, &c.res)
	if !fresh {
		c.res = c.nw.FlowResult(nid)
	}
	FromModel(&c.s, num, size, &c.res, nid)
	c.a.AddAgainstFlow(id, &c.s)
}

// hasQUIC reports whether d has a table with QUIC-LB routing.
func hasQUIC(d *model.Datapath) bool {
	if d == nil {
		return false
	}
	for _, t := range d.Tables {
		if t.QUIC.On() {
			return true
		}
	}
	return false
}

// runModelPackets is RunModel where a table has QUIC-LB routing: a QUIC
// packet's fate depends on its connection ID, not its flow alone, so
// every packet is classified and counted on its own (the Classifier still
// remembers the other flows' fates), on one goroutine.
func runModelPackets(r *pcapfile.Reader, path string, cur, against *model.Datapath, agg *Aggregator, read *atomic.Uint64) error {
	c := classify.New(cur)
	var nc *classify.Classifier
	if against != nil {
		nc = classify.New(against)
	}
	var s Sample
	var readErr error
	fault := r.Guard(func() {
		for {
			p, err := r.Next()
			if err != nil {
				if err != io.EOF {
					readErr = err
				}
				break
			}
			size := len(p.Frame)
			agg.Captured(size, p.Truncated)
			res, _ := c.Classify(p.Frame)
			FromModel(&s, p.N, size, &res, classify.FlowID{})
			agg.Add(&s)
			if nc != nil {
				res, _ := nc.Classify(p.Frame)
				FromModel(&s, p.N, size, &res, classify.FlowID{})
				agg.AddAgainst(&s)
			}
			if p.N%modelChunk == 0 {
				read.Store(uint64(p.N))
			}
		}
	})
	read.Store(uint64(r.Count()))
	if readErr == nil {
		readErr = fault
	}
	if readErr != nil {
		return fmt.Errorf("%s: %w; %d packets were processed", path, readErr, r.Count())
	}
	return nil
}
