package leak

import "math"

// Weight is the number of allocations of size bytes that one allocation in
// the snapshot stands for: 1, unless the snapshot is sampled
// (SampleBytes), where an allocation of size s was kept with probability
// 1 - exp(-s/SampleBytes) and stands for the inverse of that, so that sums
// of weights are unbiased estimates.
func (s *Snapshot) Weight(size uint64) float64 {
	if s.SampleBytes == 0 || size == 0 {
		return 1
	}
	return 1 / -math.Expm1(-float64(size)/float64(s.SampleBytes))
}

// Estimate is n allocations of size bytes, weighted and rounded to the
// nearest whole count.
func (s *Snapshot) Estimate(n, size uint64) uint64 {
	if s.SampleBytes == 0 {
		return n
	}
	return uint64(math.Round(float64(n) * s.Weight(size)))
}
