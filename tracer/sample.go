package tracer

import "math"

// negLnSteps is NEG_LN_STEPS in bpf/sample.h: the table of -ln(m) has
// negLnSteps+1 entries over m in [1/2, 1].
const negLnSteps = 1024

// MaxSampleBytes is the largest mean sampling interval, as the shim's:
// 1 TiB, so that the probes' product of the interval and -ln(u) (below
// 2^38 in units of 2^-32) fits in 64 bits.
const MaxSampleBytes = 1 << 40

// negLnTable is the table the probes draw their sampling intervals with
// (neg_ln in bpf/sample.h): -ln(1/2 + i/(2 negLnSteps)) in units of 2^-32,
// rounded, for i from 0 to negLnSteps.
func negLnTable() [negLnSteps + 1]uint32 {
	var t [negLnSteps + 1]uint32
	for i := range t {
		m := 0.5 + float64(i)/(2*negLnSteps)
		t[i] = uint32(math.Round(-math.Log(m) * (1 << 32)))
	}
	return t
}
