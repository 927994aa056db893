package stats

import (
	"container/heap"

	"github.com/mdtrace/mdtrace/output"
)

// Orderer hands calls to a Stats in the order the allocator served them,
// as their times tell, where they come in another: the records of a run
// come as the probes send them, at the end of each call, and two threads'
// calls can come in the reverse of the allocator's order (a thread frees a
// block, another gets its address back before the free's record is sent).
// A block is freed after its free started and obtained before its
// allocation ended: the free of a block is taken at its start time, an
// allocation at its end time, a realloc as the two; each thread's calls
// keep their order, whose times do not overlap.
//
// A call is handed over once the calls that come after it cannot be
// earlier: past the watermark each Push gives. One that still comes
// earlier than a call handed over is counted Late.
type Orderer struct {
	s    *Stats
	h    callHeap
	seq  uint64
	last uint64
	// most is the latest time of a call held.
	most uint64
	// Late counts the calls that came after a later call was handed
	// over: the statistics took them out of order.
	Late uint64
}

// NewOrderer returns an Orderer that hands calls to s.
func NewOrderer(s *Stats) *Orderer { return &Orderer{s: s} }

type keyed struct {
	key, seq uint64
	c        Call
}

type callHeap []keyed

func (h callHeap) Len() int { return len(h) }
func (h callHeap) Less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
	}
	return h[i].seq < h[j].seq
}
func (h callHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *callHeap) Push(x any)   { *h = append(*h, x.(keyed)) }
func (h *callHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Push adds a call, then hands over every call before watermark: the
// caller knows that no call to come took effect before it. A call without
// times is handed over in its turn.
func (o *Orderer) Push(c Call, watermark uint64) {
	if c.StartNS == 0 && c.EndNS == 0 && len(o.h) == 0 {
		o.s.Add(&c)
		return
	}
	if c.Type == output.RecordRealloc && c.Arg != 0 && c.Ptr != 0 {
		f, a := c, c
		f.part, a.part = reallocFree, reallocAlloc
		o.push(f)
		o.push(a)
	} else {
		o.push(c)
	}
	o.release(watermark)
}

func (o *Orderer) push(c Call) {
	o.seq++
	key := c.time()
	if key == 0 {
		// A call without times goes after the calls before it.
		key = max(o.last, o.most)
	}
	o.most = max(o.most, key)
	heap.Push(&o.h, keyed{key, o.seq, c})
}

func (o *Orderer) release(watermark uint64) {
	for len(o.h) > 0 && o.h[0].key < watermark {
		o.pop()
	}
}

func (o *Orderer) pop() {
	k := heap.Pop(&o.h).(keyed)
	if k.key < o.last {
		o.Late++
	} else {
		o.last = k.key
	}
	o.s.Add(&k.c)
}

// Stats returns the statistics the calls handed over add up to.
func (o *Orderer) Stats() *Stats { return o.s }

// Flush hands over every call held.
func (o *Orderer) Flush() {
	for len(o.h) > 0 {
		o.pop()
	}
}
