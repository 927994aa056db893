// Package stats adds up a process's allocator calls, one at a time, into
// heaptrack-like statistics: the calls and bytes allocated, the peak of
// the live heap and when it came, the temporary allocations, the sizes
// asked for by powers of two, and the call sites that allocate the most
// often and that held the most at their peak. It reads the calls of a run
// (mdtrace --stats, with each new block's backtrace) or of a record_allocs
// file (mdtrace stats, without them), and needs no kernel.
package stats

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
)

// Call is one allocator call, as a record_allocs record says it, with the
// backtrace of the block it made.
type Call struct {
	TID  int32
	Type output.RecordType
	// Ptr is the pointer returned; for a free the pointer freed.
	Ptr uint64
	// Size is the size asked for (calloc: an element's); Arg is calloc's
	// count and realloc's old pointer.
	Size, Arg uint64
	// StartNS and EndNS are when the call started and ended
	// (CLOCK_MONOTONIC), 0 if unknown.
	StartNS, EndNS uint64
	// Stack names the new block's backtrace, 0 if none.
	Stack uint64
	// part tells the halves of a realloc that an Orderer splits: the free
	// of its old block, then the allocation of its new one.
	part uint8
}

const (
	whole = iota
	reallocFree
	reallocAlloc
)

// CallOf is a record's call, without a backtrace.
func CallOf(r *output.Record) Call {
	return Call{TID: r.TID, Type: r.Type, Ptr: r.Ptr, Size: r.Size, Arg: r.Arg, StartNS: r.StartNS, EndNS: r.EndNS}
}

// Stats is what the calls added so far add up to. The zero value is not
// ready: use New.
type Stats struct {
	calls uint64
	kinds [output.RecordThreadDone + 1]uint64
	// Allocs and AllocBytes are the blocks made (a realloc's new block
	// counts) and their sizes.
	Allocs, AllocBytes uint64
	// Failed counts the allocating calls that returned NULL.
	Failed uint64
	// Frees counts the blocks freed (by free or realloc); UnknownFrees the
	// frees of pointers no call seen made (blocks made before tracing
	// began, or records lost).
	Frees, UnknownFrees uint64
	// Reused counts the blocks made at the address of a live one: the
	// free between was not seen.
	Reused uint64
	// Temporary counts the blocks freed with no other allocation by their
	// thread between (heaptrack's temporary allocations).
	Temporary uint64
	// LiveBytes and LiveBlocks are the heap now; PeakBytes and PeakBlocks
	// its largest, reached by call PeakCall (counted from 1) at PeakNS
	// (0: the calls had no times).
	LiveBytes, LiveBlocks uint64
	PeakBytes, PeakBlocks uint64
	PeakCall, PeakNS      uint64
	// FirstNS is the time of the first call that had one.
	FirstNS uint64
	// Sizes counts the blocks by size: Sizes[0] those of 0 bytes, Sizes[1]
	// those of 1 byte, Sizes[k] those of 2^(k-2)+1 to 2^(k-1) bytes.
	Sizes [66]uint64
	// Stacks tells whether any block came with a backtrace.
	Stacks bool
	// InheritedBytes and InheritedBlocks are the heap a forked child
	// started with, its parent's (Fork).
	InheritedBytes, InheritedBlocks uint64

	live      map[uint64]block
	lastAlloc map[int32]uint64
	sites     map[uint64]*Site
}

type block struct{ size, stack uint64 }

// Site is what one backtrace (a call site) allocated.
type Site struct {
	Stack uint64
	// Allocs and Bytes are the blocks it made and their sizes; Temporary
	// those of them that were temporary.
	Allocs, Bytes, Temporary uint64
	// Live is what its blocks hold now, Peak the most they held at once.
	Live, Peak uint64
}

// New returns empty statistics.
func New() *Stats {
	return &Stats{live: map[uint64]block{}, lastAlloc: map[int32]uint64{}, sites: map[uint64]*Site{}}
}

// Fork returns the statistics of a child that s's process forks now: its
// heap starts as a copy of the parent's, live from the start, and its
// calls are its own.
func (s *Stats) Fork() *Stats {
	c := New()
	for ptr, b := range s.live {
		c.live[ptr] = b
		site := c.sites[b.stack]
		if site == nil {
			site = &Site{Stack: b.stack}
			c.sites[b.stack] = site
		}
		site.Live += b.size
		site.Peak = site.Live
	}
	c.LiveBytes, c.LiveBlocks = s.LiveBytes, s.LiveBlocks
	c.PeakBytes, c.PeakBlocks = s.LiveBytes, s.LiveBlocks
	c.InheritedBytes, c.InheritedBlocks = s.LiveBytes, s.LiveBlocks
	c.Stacks = s.Stacks
	return c
}

// Calls is the number of calls added, thread_done records aside.
func (s *Stats) Calls() uint64 { return s.calls }

// Add adds one call. Calls must come in an order that keeps each pointer's
// story (its allocation before its free), as each thread's calls in call
// order do.
func (s *Stats) Add(c *Call) {
	if c.Type == output.RecordThreadDone {
		delete(s.lastAlloc, c.TID)
		return
	}
	if c.part != reallocAlloc {
		s.calls++
		if int(c.Type) < len(s.kinds) {
			s.kinds[c.Type]++
		}
	}
	if t := c.time(); t != 0 && s.FirstNS == 0 {
		s.FirstNS = t
	}
	switch c.Type {
	case output.RecordMalloc, output.RecordMemalign:
		s.alloc(c, c.Size)
	case output.RecordCalloc:
		hi, lo := bits.Mul64(c.Size, c.Arg)
		if hi != 0 {
			lo = ^uint64(0)
		}
		s.alloc(c, lo)
	case output.RecordRealloc:
		// A realloc frees its old block and makes a new one, as
		// heaptrack counts it; one that fails keeps the old block.
		if c.Ptr == 0 && c.Size != 0 {
			if c.part != reallocAlloc {
				s.Failed++
			}
			return
		}
		if c.Arg != 0 && c.part != reallocAlloc {
			s.free(c.TID, c.Arg)
		}
		if c.Ptr != 0 && c.part != reallocFree {
			s.alloc(c, c.Size)
		}
	case output.RecordFree:
		if c.Ptr != 0 {
			s.free(c.TID, c.Ptr)
		}
	}
}

// time is when the call took effect, as well as its times tell: when it
// ended for a block it made (it had the block by then), when it started
// for one it freed.
func (c *Call) time() uint64 {
	if c.EndNS != 0 && (c.Type != output.RecordFree && c.part != reallocFree) {
		return c.EndNS
	}
	if c.StartNS != 0 {
		return c.StartNS
	}
	return c.EndNS
}

func (s *Stats) alloc(c *Call, size uint64) {
	if c.Ptr == 0 {
		s.Failed++
		return
	}
	if old, ok := s.live[c.Ptr]; ok {
		s.Reused++
		s.drop(old)
	}
	s.live[c.Ptr] = block{size, c.Stack}
	s.lastAlloc[c.TID] = c.Ptr
	s.Allocs++
	s.AllocBytes += size
	s.LiveBytes += size
	s.LiveBlocks++
	if size == 0 {
		s.Sizes[0]++
	} else {
		s.Sizes[bits.Len64(size-1)+1]++
	}
	if c.Stack != 0 {
		s.Stacks = true
	}
	site := s.sites[c.Stack]
	if site == nil {
		site = &Site{Stack: c.Stack}
		s.sites[c.Stack] = site
	}
	site.Allocs++
	site.Bytes += size
	site.Live += size
	site.Peak = max(site.Peak, site.Live)
	if s.LiveBytes > s.PeakBytes {
		s.PeakBytes, s.PeakBlocks, s.PeakCall, s.PeakNS = s.LiveBytes, s.LiveBlocks, s.calls, c.time()
	}
}

func (s *Stats) free(tid int32, ptr uint64) {
	b, ok := s.live[ptr]
	if !ok {
		s.UnknownFrees++
		return
	}
	delete(s.live, ptr)
	s.drop(b)
	s.Frees++
	if s.lastAlloc[tid] == ptr {
		s.Temporary++
		s.sites[b.stack].Temporary++
		s.lastAlloc[tid] = 0
	}
}

// drop takes a block out of the live heap.
func (s *Stats) drop(b block) {
	s.LiveBytes -= b.size
	s.LiveBlocks--
	s.sites[b.stack].Live -= b.size
}

// Sites returns the call sites with a backtrace, in no order.
func (s *Stats) Sites() []Site {
	out := make([]Site, 0, len(s.sites))
	for _, site := range s.sites {
		if site.Stack != 0 {
			out = append(out, *site)
		}
	}
	return out
}

// Options say how Write names what it writes.
type Options struct {
	// Frames names a backtrace's frames; nil, or NoSites set, leaves the
	// call sites out.
	Frames func(stack uint64) []stacks.Frame
	// NoSites says why there are no call sites, in their place.
	NoSites string
	// Top is how many call sites each list shows.
	Top int
	// Notes are lines about what the figures miss, written first.
	Notes []string
}

// Write writes the statistics for a reader. A figure the calls cannot
// give (the time of the peak without times, call sites without
// backtraces) is said to be missing, never written as a zero.
func (s *Stats) Write(w io.Writer, opts Options) error {
	bw := bufio.NewWriter(w)
	for _, n := range opts.Notes {
		fmt.Fprintf(bw, "Note: %s\n", n)
	}
	fmt.Fprintf(bw, "Calls: %d (malloc %d, calloc %d, memalign %d, realloc %d, free %d)\n", s.calls,
		s.kinds[output.RecordMalloc], s.kinds[output.RecordCalloc], s.kinds[output.RecordMemalign], s.kinds[output.RecordRealloc], s.kinds[output.RecordFree])
	fmt.Fprintf(bw, "Allocations: %d, %d bytes in total", s.Allocs, s.AllocBytes)
	if s.Allocs > 0 {
		fmt.Fprintf(bw, " (%.1f bytes on average)", float64(s.AllocBytes)/float64(s.Allocs))
	}
	bw.WriteString("\n")
	fmt.Fprintf(bw, "Temporary allocations: %d (%.1f%% of the allocations), freed with no other allocation by their thread between\n",
		s.Temporary, percent(s.Temporary, s.Allocs))
	fmt.Fprintf(bw, "Peak live heap: %d bytes in %d blocks", s.PeakBytes, s.PeakBlocks)
	switch {
	case s.PeakCall == 0 && s.InheritedBlocks > 0:
		bw.WriteString(", inherited at fork\n")
	case s.PeakCall == 0:
		bw.WriteString(", before any allocation\n")
	case s.PeakNS != 0 && s.FirstNS != 0:
		fmt.Fprintf(bw, ", at %v after the first call (call %d of %d)\n", time.Duration(s.PeakNS-s.FirstNS).Round(time.Microsecond), s.PeakCall, s.calls)
	default:
		fmt.Fprintf(bw, ", at call %d of %d (the calls have no times)\n", s.PeakCall, s.calls)
	}
	fmt.Fprintf(bw, "Live at the end: %d bytes in %d blocks\n", s.LiveBytes, s.LiveBlocks)
	if s.InheritedBlocks > 0 {
		fmt.Fprintf(bw, "Inherited at fork: %d bytes in %d blocks, the parent's, live from the start\n", s.InheritedBytes, s.InheritedBlocks)
	}
	for _, n := range []struct {
		n    uint64
		what string
	}{
		{s.Failed, "allocating calls returned NULL"},
		{s.UnknownFrees, "frees of a pointer no call seen allocated: not counted"},
		{s.Reused, "blocks made at the address of a live block, whose free was not seen: the older one counted freed"},
	} {
		if n.n != 0 {
			fmt.Fprintf(bw, "%d %s\n", n.n, n.what)
		}
	}
	s.writeSizes(bw)
	s.writeSites(bw, opts)
	return bw.Flush()
}

func percent(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// writeSizes writes the histogram of the sizes, from the smallest bucket
// used to the largest.
func (s *Stats) writeSizes(bw *bufio.Writer) {
	first, last := -1, -1
	var most uint64
	for k, n := range s.Sizes {
		if n == 0 {
			continue
		}
		if first < 0 {
			first = k
		}
		last = k
		most = max(most, n)
	}
	bw.WriteString("\nAllocations by size, in powers of two:\n")
	if first < 0 {
		bw.WriteString("  none\n")
		return
	}
	labels := make([]string, last+1)
	width := 0
	for k := first; k <= last; k++ {
		switch k {
		case 0:
			labels[k] = "0"
		case 1:
			labels[k] = "1"
		default:
			lo, hi := uint64(1)<<(k-2)+1, uint64(1)<<(k-1)
			if k == 65 {
				hi = ^uint64(0)
			}
			labels[k] = fmt.Sprintf("%d-%d", lo, hi)
		}
		width = max(width, len(labels[k]))
	}
	for k := first; k <= last; k++ {
		n := s.Sizes[k]
		bar := ""
		if n > 0 {
			bar = " " + strings.Repeat("#", int((n*40+most-1)/most))
		}
		fmt.Fprintf(bw, "  %*s bytes %10d %5.1f%%%s\n", width, labels[k], n, percent(n, s.Allocs), bar)
	}
}

// writeSites writes the call sites that made the most blocks, then those
// that held the most at their peak.
func (s *Stats) writeSites(bw *bufio.Writer, opts Options) {
	if opts.NoSites != "" || opts.Frames == nil {
		fmt.Fprintf(bw, "\nCall sites: %s\n", opts.NoSites)
		return
	}
	sites := s.Sites()
	if len(sites) == 0 {
		bw.WriteString("\nCall sites: no allocation had a backtrace\n")
		return
	}
	if n := s.sites[0]; n != nil && n.Allocs > 0 {
		fmt.Fprintf(bw, "\nNote: %d allocations had no backtrace, and are in no call site below\n", n.Allocs)
	}
	top := opts.Top
	if top <= 0 || top > len(sites) {
		top = len(sites)
	}
	list := func(title string, by func(a Site) uint64, line func(a Site) string) {
		slices.SortFunc(sites, func(a, b Site) int {
			if c := cmp.Compare(by(b), by(a)); c != 0 {
				return c
			}
			if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
				return c
			}
			return cmp.Compare(a.Stack, b.Stack)
		})
		fmt.Fprintf(bw, "\n%s (%d of %d call sites):\n", title, top, len(sites))
		for _, site := range sites[:top] {
			bw.WriteString(line(site))
			frames := opts.Frames(site.Stack)
			if len(frames) == 0 {
				bw.WriteString("          [backtrace not found]\n")
				continue
			}
			bw.WriteString(output.BacktraceString(frames))
		}
	}
	list("Call sites by allocations", func(a Site) uint64 { return a.Allocs }, func(a Site) string {
		return fmt.Sprintf("%d allocations (%.1f%%), %d bytes, %d temporary, peak %d bytes:\n",
			a.Allocs, percent(a.Allocs, s.Allocs), a.Bytes, a.Temporary, a.Peak)
	})
	list("Call sites by peak live bytes, each its own largest", func(a Site) uint64 { return a.Peak }, func(a Site) string {
		return fmt.Sprintf("peak %d bytes, %d allocations, %d bytes in total, %d live at the end:\n", a.Peak, a.Allocs, a.Bytes, a.Live)
	})
}
