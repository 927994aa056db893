// Package record keeps record_allocs' records with bounded memory, in
// Android's order, for the record file: past a limit they are sorted and
// spilled to an unlinked temporary file, and merged back when written. It
// needs no kernel.
package record

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/mdtrace/mdtrace/output"
)

// Store keeps record_allocs records with bounded memory: past
// memLimit records, they are sorted and spilled to an unlinked temporary
// file as a run, and Each merges the runs with what is in memory.
//
// Records are ordered by start time (thread_done by its end time); records
// with the same key keep their arrival order, so each thread's records keep
// its call order.
//
// In memory, records fill fixed-size chunks, which are sorted one by one
// and merged: a record is never copied to make room, and the chunks of a
// spilled run are used again, so that memory is touched once.
type Store struct {
	memLimit int
	chunks   [][]output.Record // in arrival order; only the last is not full
	spare    [][]output.Record // emptied chunks, for reuse
	inMem    int
	file     *os.File // runs, one after the other
	runs     []spillRun
	n        uint64
}

// spillRun is one sorted run in the spill file.
type spillRun struct{ off, count int64 }

// spilledSize is the size of one record in the spill file.
const spilledSize = 8 * 8

// DefaultMemLimit is how many records stay in memory (about 64 MB).
const DefaultMemLimit = 1 << 20

// maxRecordChunk is the largest chunk, in records (4 MiB).
const maxRecordChunk = 1 << 16

// NewStore makes a store that keeps up to memLimit records in memory.
func NewStore(memLimit int) *Store {
	return &Store{memLimit: memLimit}
}

// KeepInMemory makes the store keep up to n records in memory, spilling
// none before: for when spilling failed.
func (s *Store) KeepInMemory(n int) { s.memLimit = n }

// Len returns the number of records kept.
func (s *Store) Len() uint64 { return s.n }

func recordKey(r *output.Record) uint64 {
	if r.StartNS != 0 {
		return r.StartNS
	}
	return r.EndNS
}

// sortRecords sorts records by recordKey, keeping the order of equal keys.
// The generic sort moves records directly, where sort.SliceStable swaps
// them through reflection; they arrive nearly sorted (by end time), which
// leaves the merges little to move.
func sortRecords(recs []output.Record) {
	slices.SortStableFunc(recs, func(a, b output.Record) int { return cmp.Compare(recordKey(&a), recordKey(&b)) })
}

// chunkLen is the size of a chunk: an eighth of memLimit, within bounds.
func (s *Store) chunkLen() int {
	return min(max(s.memLimit/8, 1), maxRecordChunk)
}

// Add keeps one record.
func (s *Store) Add(r output.Record) error {
	last := len(s.chunks) - 1
	if last < 0 || len(s.chunks[last]) == cap(s.chunks[last]) {
		var c []output.Record
		if n := len(s.spare); n > 0 && cap(s.spare[n-1]) == s.chunkLen() {
			c, s.spare = s.spare[n-1][:0], s.spare[:n-1]
		} else {
			c = make([]output.Record, 0, s.chunkLen())
		}
		s.chunks = append(s.chunks, c)
		last++
	}
	s.chunks[last] = append(s.chunks[last], r)
	s.inMem++
	s.n++
	if s.inMem >= s.memLimit {
		return s.spill()
	}
	return nil
}

// memCursors sorts the chunks and returns a cursor on each, numbered from
// first on in arrival order.
func (s *Store) memCursors(first int) []*runCursor {
	cs := make([]*runCursor, 0, len(s.chunks))
	for i, c := range s.chunks {
		sortRecords(c)
		cs = append(cs, &runCursor{idx: first + i, mem: c, left: int64(len(c))})
	}
	return cs
}

// dropMem empties memory, keeping the chunks for reuse.
func (s *Store) dropMem() {
	for _, c := range s.chunks {
		s.spare = append(s.spare, c[:0])
	}
	s.chunks = s.chunks[:0]
	s.inMem = 0
}

// spill writes the records in memory as one sorted run.
func (s *Store) spill() error {
	if s.file == nil {
		f, err := os.CreateTemp("", "mdtrace-records-*")
		if err != nil {
			return fmt.Errorf("creating the record spill file: %w", err)
		}
		os.Remove(f.Name()) // gone with mdtrace, whatever happens
		s.file = f
	}
	off, err := s.file.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(s.file, 1<<20)
	var b [spilledSize]byte
	err = merge(s.memCursors(0), func(r *output.Record) error {
		encodeRecord(b[:], r)
		if _, err := w.Write(b[:]); err != nil {
			return fmt.Errorf("writing the record spill file: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing the record spill file: %w", err)
	}
	s.runs = append(s.runs, spillRun{off, int64(s.inMem)})
	s.dropMem()
	return nil
}

func encodeRecord(b []byte, r *output.Record) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(uint32(r.TID))|uint64(r.Type)<<32)
	le.PutUint64(b[8:], r.Ptr)
	le.PutUint64(b[16:], r.Size)
	le.PutUint64(b[24:], r.Arg)
	le.PutUint64(b[32:], r.StartNS)
	le.PutUint64(b[40:], r.EndNS)
	le.PutUint64(b[48:], uint64(r.Present))
	le.PutUint64(b[56:], uint64(uint32(r.PID)))
}

func decodeRecord(b []byte, r *output.Record) {
	le := binary.LittleEndian
	v := le.Uint64(b[0:])
	r.TID = int32(uint32(v))
	r.Type = output.RecordType(v >> 32)
	r.Ptr = le.Uint64(b[8:])
	r.Size = le.Uint64(b[16:])
	r.Arg = le.Uint64(b[24:])
	r.StartNS = le.Uint64(b[32:])
	r.EndNS = le.Uint64(b[40:])
	r.Present = int64(le.Uint64(b[48:]))
	r.PID = int32(uint32(le.Uint64(b[56:])))
}

// Each calls fn with every record in order.
func (s *Store) Each(fn func(*output.Record) error) error {
	var cs []*runCursor
	for i, run := range s.runs {
		cs = append(cs, &runCursor{idx: i, r: bufio.NewReaderSize(io.NewSectionReader(s.file, run.off, run.count*spilledSize), 1<<16), left: run.count})
	}
	// Memory last: its records came after the runs'.
	return merge(append(cs, s.memCursors(len(s.runs))...), fn)
}

// merge calls fn with the records of the sorted runs cs in order, those of
// equal keys in the order of the runs' idx.
func merge(cs []*runCursor, fn func(*output.Record) error) error {
	if len(cs) == 1 && cs[0].r == nil {
		for i := range cs[0].mem {
			if err := fn(&cs[0].mem[i]); err != nil {
				return err
			}
		}
		return nil
	}
	h := &runHeap{}
	for _, c := range cs {
		if err := c.next(); err != nil {
			return err
		}
		heap.Push(h, c)
	}
	for h.Len() > 0 {
		c := (*h)[0]
		if c.done {
			heap.Pop(h)
			continue
		}
		if err := fn(&c.cur); err != nil {
			return err
		}
		if err := c.next(); err != nil {
			return err
		}
		heap.Fix(h, 0)
	}
	return nil
}

// Clear forgets every record.
func (s *Store) Clear() {
	s.dropMem()
	s.runs = nil
	s.n = 0
	if s.file != nil {
		s.file.Truncate(0)
	}
}

// Close releases the spill file.
func (s *Store) Close() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// runCursor reads one sorted run.
type runCursor struct {
	idx  int
	r    *bufio.Reader
	mem  []output.Record
	left int64
	cur  output.Record
	done bool
	buf  [spilledSize]byte
}

func (c *runCursor) next() error {
	if c.left == 0 {
		c.done = true
		return nil
	}
	c.left--
	if c.r == nil {
		c.cur = c.mem[0]
		c.mem = c.mem[1:]
		return nil
	}
	if _, err := io.ReadFull(c.r, c.buf[:]); err != nil {
		return fmt.Errorf("reading the record spill file: %w", err)
	}
	decodeRecord(c.buf[:], &c.cur)
	return nil
}

// runHeap orders cursors by their current record's key, then by run.
type runHeap []*runCursor

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	if h[i].done != h[j].done {
		return h[i].done
	}
	ki, kj := recordKey(&h[i].cur), recordKey(&h[j].cur)
	if ki != kj {
		return ki < kj
	}
	return h[i].idx < h[j].idx
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(*runCursor)) }
func (h *runHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
