package leak

import "math"

// SampleWeight is the number of allocations of size bytes that one sampled
// allocation stands for, sampled as heapprofd samples, one every
// sampleBytes bytes on average (0: not sampled, every allocation is
// there): a block of sampleBytes bytes or more is always kept, and stands
// for itself; a smaller one of s bytes was kept with probability
// 1 - exp(-s/sampleBytes), and stands for the inverse of that, so that
// sums of weights are unbiased estimates.
func SampleWeight(size, sampleBytes uint64) float64 {
	if sampleBytes == 0 || size == 0 || size >= sampleBytes {
		return 1
	}
	return 1 / -math.Expm1(-float64(size)/float64(sampleBytes))
}

// Weight is the number of allocations of size bytes that one allocation in
// the snapshot stands for: SampleWeight with the snapshot's SampleBytes.
func (s *Snapshot) Weight(size uint64) float64 {
	return SampleWeight(size, s.SampleBytes)
}

// Estimate is n allocations of size bytes, weighted and rounded to the
// nearest whole count.
func (s *Snapshot) Estimate(n, size uint64) uint64 {
	if s.SampleBytes == 0 {
		return n
	}
	return uint64(math.Round(float64(n) * s.Weight(size)))
}
