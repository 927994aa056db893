package leak

import (
	"cmp"
	"math"
	"slices"
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
	keys := s.sortedKeys(false)
	list := make([]Alloc, len(keys))
	for i, k := range keys {
		list[i] = s.Allocs[k.idx]
	}
	return list
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
func (s *Snapshot) UniqueList(onlyWithBacktrace bool) []Record {
	keys := s.sortedKeys(onlyWithBacktrace)
	// First the runs, so that the records are allocated once: growing
	// them by append would copy a million of them about five times.
	starts := make([]uint64, (len(keys)+63)/64) // bit i: keys[i] starts a record
	n := 0
	for i := range keys {
		if i == 0 || !s.sameRecord(&keys[i-1], &keys[i]) {
			starts[i/64] |= 1 << (i % 64)
			n++
		}
	}
	recs := make([]Record, 0, n)
	for i, k := range keys {
		if starts[i/64]&(1<<(i%64)) == 0 {
			recs[len(recs)-1].Num++
			continue
		}
		a := &s.Allocs[k.idx]
		recs = append(recs, Record{Zygote: a.Zygote, Size: a.Size, Num: 1, StackID: a.StackID, Frames: s.Backtrace(a)})
	}
	if s.SampleBytes != 0 {
		// The allocations of a record have one size, and one weight.
		for i := range recs {
			recs[i].Num = s.Estimate(recs[i].Num, recs[i].Size)
		}
	}
	return recs
}

// sameRecord reports whether two allocations, by their keys, merge into one
// record when adjacent: the same zygote flag, size and backtrace frames.
func (s *Snapshot) sameRecord(x, y *sortKey) bool {
	if x.size != y.size || x.rank != y.rank {
		return false
	}
	a, b := &s.Allocs[x.idx], &s.Allocs[y.idx]
	return a.StackID == b.StackID || slices.Equal(s.Backtrace(a), s.Backtrace(b))
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
