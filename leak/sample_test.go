package leak

import (
	"math"
	"testing"
)

func TestWeight(t *testing.T) {
	s := &Snapshot{}
	if w := s.Weight(100); w != 1 {
		t.Errorf("unsampled weight %v", w)
	}
	s.SampleBytes = 4096
	for _, tc := range []struct {
		size uint64
		want float64
	}{
		{4096, 1 / (1 - math.Exp(-1))},
		{64, 1 / (1 - math.Exp(-64.0/4096))},
		{1 << 30, 1},
		{0, 1},
	} {
		if w := s.Weight(tc.size); math.Abs(w-tc.want) > 1e-9*tc.want {
			t.Errorf("Weight(%d) = %v, want %v", tc.size, w, tc.want)
		}
	}
}

// TestSampledCounts: with SampleBytes, heap dump records and sites count
// estimates: each allocation stands for the inverse of its chance to be
// sampled; sizes stay exact.
func TestSampledCounts(t *testing.T) {
	s := &Snapshot{SampleBytes: 4096, Stacks: map[uint64][]uint64{1: {0x10}, 2: {0x20}}}
	for i := range 10 {
		s.Allocs = append(s.Allocs, Alloc{Ptr: uint64(0x1000 + 0x100*i), Size: 64, StackID: 1})
	}
	for i := range 3 {
		s.Allocs = append(s.Allocs, Alloc{Ptr: uint64(0x9000 + 0x2000*i), Size: 4096, StackID: 2})
	}
	small := math.Round(10 / (1 - math.Exp(-64.0/4096)))
	large := math.Round(3 / (1 - math.Exp(-1)))
	recs := s.UniqueList(false)
	if len(recs) != 2 || recs[0].Size != 4096 || recs[0].Num != uint64(large) || recs[1].Size != 64 || recs[1].Num != uint64(small) {
		t.Errorf("records %+v, want 4096 x %v and 64 x %v", recs, large, small)
	}
	sites, total := s.Sites()
	wantSmall := Site{StackID: 1, Frames: []uint64{0x10}, Bytes: uint64(math.Round(640 / (1 - math.Exp(-64.0/4096)))), Blocks: uint64(small)}
	// The 64-byte site has more estimated bytes (41281 against 19439).
	if len(sites) != 2 || sites[0].Bytes != wantSmall.Bytes || sites[0].Blocks != wantSmall.Blocks || sites[1].Blocks != uint64(large) {
		t.Errorf("sites %+v, want the 64-byte site %+v", sites, wantSmall)
	}
	if total.Blocks != sites[0].Blocks+sites[1].Blocks || total.Bytes != sites[0].Bytes+sites[1].Bytes {
		t.Errorf("total %+v", total)
	}
	if got := s.Estimate(10, 64); got != uint64(small) {
		t.Errorf("Estimate(10, 64) = %d, want %v", got, small)
	}
}
