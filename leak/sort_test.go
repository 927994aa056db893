package leak

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// stableOrder is the GetList order written as a stable sort of the
// allocations themselves: the reference for SortList and UniqueList.
func (s *Snapshot) stableOrder(onlyWithBacktrace bool) []Alloc {
	var list []Alloc
	for _, a := range s.Allocs {
		if !onlyWithBacktrace || a.StackID != 0 {
			list = append(list, a)
		}
	}
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
	return list
}

// randomSnapshot makes a snapshot with many ties: few sizes, repeated
// pointers, zygote blocks, stack ids without
// frames or unknown, and backtraces longer than BacktraceSize.
func randomSnapshot(rng *rand.Rand, n int) *Snapshot {
	s := &Snapshot{Stacks: map[uint64][]uint64{}, BacktraceSize: 4}
	for id := uint64(1); id <= 12; id++ {
		frames := make([]uint64, rng.IntN(7))
		for j := range frames {
			frames[j] = uint64(0x1000 + rng.IntN(3))
		}
		s.Stacks[id] = frames
	}
	for range n {
		s.Allocs = append(s.Allocs, Alloc{
			Ptr:     uint64(0x100 * rng.IntN(n/2+1)),
			Size:    uint64(8 * rng.IntN(4)),
			Zygote:  rng.IntN(4) == 0,
			StackID: uint64(rng.IntN(14)), // 0: none; 13: not in Stacks
		})
	}
	return s
}

func TestSortListMatchesStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		s := randomSnapshot(rng, 1+rng.IntN(300))
		if got, want := s.SortList(), s.stableOrder(false); !slices.Equal(got, want) {
			t.Fatalf("SortList differs from the stable sort:\n got %v\nwant %v", got, want)
		}
		for _, only := range []bool{false, true} {
			var want []Record
			for _, a := range s.stableOrder(only) {
				frames := s.Backtrace(&a)
				if n := len(want); n > 0 && want[n-1].Zygote == a.Zygote && want[n-1].Size == a.Size && slices.Equal(want[n-1].Frames, frames) {
					want[n-1].Num++
					continue
				}
				want = append(want, Record{Zygote: a.Zygote, Size: a.Size, Num: 1, StackID: a.StackID, Frames: frames})
			}
			got := s.UniqueList(only)
			if !slices.EqualFunc(got, want, func(a, b Record) bool {
				return a.Zygote == b.Zygote && a.Size == b.Size && a.Num == b.Num && a.StackID == b.StackID && slices.Equal(a.Frames, b.Frames)
			}) {
				t.Fatalf("UniqueList(%v) differs from the stable sort's:\n got %v\nwant %v", only, got, want)
			}
		}
	}
}

// Sort puts the allocations in place in the stable sort's order, ties
// (repeated pointers) included, and leaves no sort state in them.
func TestSortInPlaceMatchesStableSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 201 {
		n := 1 + rng.IntN(300)
		if i == 200 {
			// Split between two goroutines.
			n = 3 * parallelSortMin
		}
		s := randomSnapshot(rng, n)
		want := s.stableOrder(false)
		s.Sort()
		if !slices.Equal(s.Allocs, want) {
			t.Fatalf("Sort of %d allocations differs from the stable sort", n)
		}
	}
}
