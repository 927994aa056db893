package leak

import (
	"cmp"
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
	list := slices.Clone(s.Allocs)
	s.sortAllocs(list)
	return list
}

func (s *Snapshot) sortAllocs(list []Alloc) {
	slices.SortStableFunc(list, func(a, b Alloc) int {
		if a.Zygote != b.Zygote {
			if a.Zygote {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(b.Size, a.Size); c != 0 {
			return c
		}
		af, bf := s.Backtrace(&a), s.Backtrace(&b)
		switch {
		case af != nil && bf == nil:
			return -1
		case af == nil && bf != nil:
			return 1
		case af == nil && bf == nil:
			return cmp.Compare(a.Ptr, b.Ptr)
		}
		if c := cmp.Compare(len(bf), len(af)); c != 0 {
			return c
		}
		return cmp.Compare(a.Ptr, b.Ptr)
	})
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
	list := make([]Alloc, 0, len(s.Allocs))
	for _, a := range s.Allocs {
		if onlyWithBacktrace && a.StackID == 0 {
			continue
		}
		list = append(list, a)
	}
	s.sortAllocs(list)

	var recs []Record
	for i := range list {
		a := &list[i]
		frames := s.Backtrace(a)
		if n := len(recs); n > 0 {
			last := &recs[n-1]
			if last.Zygote == a.Zygote && last.Size == a.Size && slices.Equal(last.Frames, frames) {
				last.Num++
				continue
			}
		}
		recs = append(recs, Record{Zygote: a.Zygote, Size: a.Size, Num: 1, StackID: a.StackID, Frames: frames})
	}
	return recs
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
