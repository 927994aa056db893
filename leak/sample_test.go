package leak

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
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
		// At the interval and past it, always sampled, as heapprofd does.
		{4096, 1},
		{4095, 1 / (1 - math.Exp(-4095.0/4096))},
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
	// Blocks of the interval or more are always sampled: exact.
	large := 3.0
	recs := s.UniqueList(false)
	if len(recs) != 2 || recs[0].Size != 4096 || recs[0].Num != uint64(large) || recs[1].Size != 64 || recs[1].Num != uint64(small) {
		t.Errorf("records %+v, want 4096 x %v and 64 x %v", recs, large, small)
	}
	sites, total := s.Sites()
	wantSmall := Site{StackID: 1, Frames: []uint64{0x10}, Bytes: uint64(math.Round(640 / (1 - math.Exp(-64.0/4096)))), Blocks: uint64(small)}
	// The 64-byte site has more estimated bytes (41281 against 12288).
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

// TestSampledLeakInfo: get_malloc_leak_info's entries count estimates and
// its total memory is theirs; the size field stays exact.
func TestSampledLeakInfo(t *testing.T) {
	s := &Snapshot{SampleBytes: 1000, BacktraceSize: 2, Stacks: map[uint64][]uint64{1: {0x10, 0x11}}}
	for i := range 4 {
		s.Allocs = append(s.Allocs, Alloc{Ptr: uint64(0x1000 + 0x100*i), Size: 100, StackID: 1})
	}
	// 4 / (1 - exp(-0.1)) = 42.03.
	buf, overall, infoSize, total, btSize := s.LeakInfo()
	if overall != 32 || infoSize != 32 || btSize != 2 || total != 4200 {
		t.Fatalf("overall %d, info size %d, backtrace size %d, total %d; want 32, 32, 2, 4200", overall, infoSize, btSize, total)
	}
	if size, num := binary.LittleEndian.Uint64(buf), binary.LittleEndian.Uint64(buf[8:]); size != 100 || num != 42 {
		t.Errorf("entry: size %d, num %d; want 100 and 42", size, num)
	}
}

// TestSampledEstimateUnbiased: a known population sampled by the shim's
// law, each block of s bytes kept with probability 1 - exp(-s/N), or 1
// from N bytes on: the
// weighted records of its sample find the population's blocks and bytes
// within five standard deviations. The draws are seeded: the outcome is
// fixed.
func TestSampledEstimateUnbiased(t *testing.T) {
	const interval = 4096
	rng := rand.New(rand.NewPCG(1, 2))
	s := &Snapshot{SampleBytes: interval}
	var blocks, bytes, varBlocks, varBytes float64
	for i, size := range []uint64{1, 16, 64, 1000, 4096, 65536} {
		for j := range 20000 {
			sz := float64(size)
			p := -math.Expm1(-sz / interval)
			if size >= interval {
				p = 1
			}
			blocks++
			bytes += sz
			varBlocks += (1 - p) / p
			varBytes += sz * sz * (1 - p) / p
			if rng.Float64() < p {
				s.Allocs = append(s.Allocs, Alloc{Ptr: uint64(i)<<32 | uint64(j)<<4, Size: size, StackID: uint64(i + 1)})
			}
		}
	}
	recs := s.UniqueList(false)
	var est uint64
	for _, r := range recs {
		est += r.Num
	}
	if sd := math.Sqrt(varBlocks); math.Abs(float64(est)-blocks) > 5*sd {
		t.Errorf("estimated %d blocks of %d sampled, want %v within %.0f", est, len(s.Allocs), blocks, 5*sd)
	}
	if got, sd := float64(TotalMemory(recs)), math.Sqrt(varBytes); math.Abs(got-bytes) > 5*sd {
		t.Errorf("estimated %v bytes, want %v within %.0f", got, bytes, 5*sd)
	}
	// A site per size here: the sites round their blocks as the records do.
	if _, total := s.Sites(); total.Blocks != est {
		t.Errorf("sites' total %d blocks, records' %d", total.Blocks, est)
	}
}

// TestSampleWeight: not sampled, every block stands for itself; sampled,
// a block below the interval for the inverse of its chance, one of the
// interval or more for itself.
func TestSampleWeight(t *testing.T) {
	for _, tc := range []struct {
		size, interval uint64
		want           float64
	}{
		{100, 0, 1},
		{0, 4096, 1},
		{1, 4096, 1 / -math.Expm1(-1.0/4096)},
		{4095, 4096, 1 / -math.Expm1(-4095.0/4096)},
		{4096, 4096, 1},
		{1 << 40, 4096, 1},
	} {
		if w := SampleWeight(tc.size, tc.interval); math.Abs(w-tc.want) > 1e-12*tc.want {
			t.Errorf("SampleWeight(%d, %d) = %v, want %v", tc.size, tc.interval, w, tc.want)
		}
	}
}
