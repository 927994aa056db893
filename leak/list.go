package leak

import (
	"cmp"
	"iter"
	"math"
	"runtime"
	"slices"
	"sync"
)

// Record is one line of a heap dump or one entry of get_malloc_leak_info:
// live allocations merged because their zygote flag, size and backtrace are
// equal.
type Record struct {
	// Zygote is the zygote flag shared by the merged allocations.
	Zygote bool
	// Size is the requested size of each merged allocation.
	Size uint64
	// Num is the number of merged allocations.
	Num uint64
	// StackID is the stack id of the first merged allocation in GetList
	// order. Merged allocations may carry other ids with the same frames.
	StackID uint64
	// Frames is the backtrace, innermost first, nil when there is none. It
	// shares memory with Snapshot.Stacks and must not be modified.
	Frames []uint64
}

// Backtrace returns the frames of a's backtrace as Android's malloc debug
// would have stored them: at most s.BacktraceSize frames when that is
// positive, since Android never captures more, and nil when there are none.
// The result shares memory with s.Stacks.
func (s *Snapshot) Backtrace(a *Alloc) []uint64 {
	f := s.Frames(a)
	if s.BacktraceSize > 0 && len(f) > s.BacktraceSize {
		f = f[:s.BacktraceSize]
	}
	if len(f) == 0 {
		return nil
	}
	return f
}

// SortList returns a copy of s.Allocs sorted in the order of Android's
// PointerData::GetList, and leaves s.Allocs alone. The order is:
//
//  1. allocations of the parent (zygote flag clear) before zygote-child ones;
//  2. larger sizes first;
//  3. allocations with a backtrace (non-empty frames in s.Stacks) before
//     allocations without one;
//  4. between two allocations without a backtrace, lower pointer first;
//  5. longer backtraces first;
//  6. lower pointer first.
//
// Backtraces longer than s.BacktraceSize (when positive) count as cut to that
// length, as Android never stores more frames.
func (s *Snapshot) SortList() []Alloc {
	order := s.Order()
	list := make([]Alloc, len(order))
	for i, idx := range order {
		list[i] = s.Allocs[idx]
	}
	return list
}

// Order returns the indices in s.Allocs of the allocations in SortList
// order: 4 bytes per allocation where SortList's copy takes 32, for a
// report that goes through millions of them.
func (s *Snapshot) Order() []uint32 {
	keys := s.sortedKeys(false)
	order := make([]uint32, len(keys))
	for i, k := range keys {
		order[i] = k.idx
	}
	return order
}

// Sort puts s.Allocs in SortList order, in place: a report of millions of
// blocks then goes through them in that order without a copy of them or
// of their sort keys (56 bytes a block). Allocations that compare equal
// keep their order, as in SortList.
func (s *Snapshot) Sort() {
	if len(s.Allocs) > math.MaxUint32 {
		// Too many to number in sortIdx; never seen in a live table.
		order := s.Order()
		list := make([]Alloc, len(order))
		for i, idx := range order {
			list[i] = s.Allocs[idx]
		}
		s.Allocs = list
		return
	}
	for i := range s.Allocs {
		a := &s.Allocs[i]
		a.sortLen = uint16(min(len(s.Backtrace(a)), math.MaxUint16))
		a.sortIdx = uint32(i)
	}
	sortAllocs(s.Allocs)
	for i := range s.Allocs {
		s.Allocs[i].sortLen, s.Allocs[i].sortIdx = 0, 0
	}
}

// parallelSortMin is how many allocations make sortAllocs split the
// work between two goroutines.
const parallelSortMin = 1 << 16

// sortAllocs sorts allocations whose sortLen and sortIdx are set. A large
// slice is first split around a pivot, as a quicksort's first step, and
// its two parts are sorted at once, each by a goroutine: sorting a million
// allocations is a quarter of a second of a CPU, and the report waits
// for it.
func sortAllocs(allocs []Alloc) {
	if len(allocs) < parallelSortMin || runtime.GOMAXPROCS(0) < 2 {
		slices.SortFunc(allocs, compareAllocs)
		return
	}
	// The pivot: the median of a sample spread over the slice.
	const samples = 63
	sample := make([]Alloc, samples)
	for i := range sample {
		sample[i] = allocs[i*(len(allocs)-1)/(samples-1)]
	}
	slices.SortFunc(sample, compareAllocs)
	pivot := sample[samples/2]
	// Those before the pivot to the front. sortIdx makes the order total:
	// exactly one allocation compares equal to the pivot, itself, and it
	// goes to the second part.
	n := 0
	for i := range allocs {
		if compareAllocs(allocs[i], pivot) < 0 {
			allocs[i], allocs[n] = allocs[n], allocs[i]
			n++
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { slices.SortFunc(allocs[:n], compareAllocs) })
	slices.SortFunc(allocs[n:], compareAllocs)
	wg.Wait()
}

// compareAllocs is the GetList order of two allocations whose sortLen and
// sortIdx are set, as sortedKeys orders their keys.
func compareAllocs(a, b Alloc) int {
	// Parent allocations first, then larger sizes first; then allocations
	// with a backtrace before those without one, longer backtraces first;
	// then, as between two allocations without one, lower pointer first.
	if a.Zygote != b.Zygote {
		if a.Zygote {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(b.Size, a.Size); c != 0 {
		return c
	}
	if c := cmp.Compare(b.sortLen, a.sortLen); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Ptr, b.Ptr); c != 0 {
		return c
	}
	return cmp.Compare(a.sortIdx, b.sortIdx)
}

// sortKey is what the GetList order compares of one allocation, gathered
// once: comparing allocations directly would look their backtraces up in
// s.Stacks twice per comparison, and move 48-byte Allocs.
type sortKey struct {
	size uint64
	ptr  uint64
	idx  uint32 // the index in s.Allocs
	// rank is the zygote flag in bit 31, and below it MaxInt32 minus the
	// length of the backtrace (0 without one): for allocations of one
	// size, GetList's order is rank's.
	rank uint32
}

// sortedKeys returns the keys of s.Allocs (without those with StackID 0,
// with onlyWithBacktrace) in SortList order. Allocations that compare equal
// keep their order in s.Allocs, as in a stable sort: the index is the last
// criterion, which makes the order total.
func (s *Snapshot) sortedKeys(onlyWithBacktrace bool) []sortKey {
	keys := make([]sortKey, 0, len(s.Allocs))
	for i := range s.Allocs {
		a := &s.Allocs[i]
		if onlyWithBacktrace && a.StackID == 0 {
			continue
		}
		rank := uint32(math.MaxInt32 - min(len(s.Backtrace(a)), math.MaxInt32))
		if a.Zygote {
			rank |= 1 << 31
		}
		keys = append(keys, sortKey{size: a.Size, ptr: a.Ptr, idx: uint32(i), rank: rank})
	}
	slices.SortFunc(keys, func(a, b sortKey) int {
		// Parent allocations first, then larger sizes first; then
		// allocations with a backtrace before those without one, longer
		// backtraces first; then, as between two allocations without one,
		// lower pointer first.
		if c := cmp.Compare(a.rank>>31, b.rank>>31); c != 0 {
			return c
		}
		if c := cmp.Compare(b.size, a.size); c != 0 {
			return c
		}
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ptr, b.ptr); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	})
	return keys
}

// UniqueList returns the records of Android's PointerData::GetUniqueList:
// the allocations in SortList order, with each run of ADJACENT allocations
// that have the same zygote flag, size and backtrace merged into one record.
//
// Two backtraces are the same when their frames are equal, whatever their
// stack ids; all allocations without a backtrace share one (empty)
// backtrace, as Android's null frame_info pointers compare equal. Only
// adjacent allocations merge, exactly as in Android: since allocations of one
// size and backtrace length are ordered by pointer, two allocations with the
// same backtrace stay in separate records when an allocation with another
// backtrace of the same size and length lies between their pointers.
//
// With onlyWithBacktrace, allocations with StackID 0 (no backtrace was
// attempted) are left out, as get_malloc_leak_info does; allocations with a
// stack id whose frames are empty are kept. Otherwise every allocation is
// kept, as in a heap dump.
//
// It puts s.Allocs in SortList order (Sort).
func (s *Snapshot) UniqueList(onlyWithBacktrace bool) []Record {
	s.Sort()
	// First the runs, so that the records are allocated once: growing
	// them by append would copy a million of them about five times.
	n, _ := s.SortedTotals(onlyWithBacktrace)
	recs := make([]Record, 0, n)
	for r := range s.SortedRecords(onlyWithBacktrace) {
		recs = append(recs, r)
	}
	return recs
}

// SortedRecords yields the records of UniqueList one by one, without
// making the list, from s.Allocs sorted by Sort.
func (s *Snapshot) SortedRecords(onlyWithBacktrace bool) iter.Seq[Record] {
	return func(yield func(Record) bool) {
		var (
			r    Record
			have bool
		)
		for i := range s.Allocs {
			a := &s.Allocs[i]
			if onlyWithBacktrace && a.StackID == 0 {
				continue
			}
			frames := s.Backtrace(a)
			if have && r.Zygote == a.Zygote && r.Size == a.Size && (r.StackID == a.StackID || slices.Equal(r.Frames, frames)) {
				r.Num++
				continue
			}
			if have && !yield(s.estimated(r)) {
				return
			}
			r = Record{Zygote: a.Zygote, Size: a.Size, Num: 1, StackID: a.StackID, Frames: frames}
			have = true
		}
		if have {
			yield(s.estimated(r))
		}
	}
}

// estimated is r with its count estimated when s is a sample: the
// allocations of a record have one size, and one weight.
func (s *Snapshot) estimated(r Record) Record {
	if s.SampleBytes != 0 {
		r.Num = s.Estimate(r.Num, r.Size)
	}
	return r
}

// SortedTotals returns the number of records SortedRecords yields and
// their TotalMemory.
func (s *Snapshot) SortedTotals(onlyWithBacktrace bool) (records int, total uint64) {
	for r := range s.SortedRecords(onlyWithBacktrace) {
		records++
		total += r.Size * r.Num
	}
	return records, total
}

// TotalMemory returns the sum of Size*Num over recs, the "Total memory" of a
// heap dump and the total_memory of get_malloc_leak_info. Like Android's
// size_t arithmetic it wraps around on overflow.
func TotalMemory(recs []Record) uint64 {
	var total uint64
	for _, r := range recs {
		total += r.Size * r.Num
	}
	return total
}
