package tracer

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestNegLnTable: the probes' -ln(u), from the leading zero bits of u and
// the interpolated table, is within 2e-7 of math.Log's over every range
// of u (the shim's series is within 1e-7), and ln(2)'s constant is the
// table's first entry.
func TestNegLnTable(t *testing.T) {
	tab := negLnTable()
	if tab[0] != ln2Q32 || tab[negLnSteps] != 0 {
		t.Fatalf("table ends %d and %d, want %d and 0", tab[0], tab[negLnSteps], ln2Q32)
	}
	r := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for n := range 200000 {
		x := r.Uint64() >> (n % 64)
		if x == 0 {
			continue
		}
		want := -math.Log(float64(x) / math.Exp2(64))
		got := float64(negLnOf(&tab, x)) / (1 << 32)
		worst = max(worst, math.Abs(got-want))
	}
	if worst > 2e-7 {
		t.Errorf("largest error %g, want at most 2e-7", worst)
	}
}

// TestNegLnMean: intervals drawn as the probes draw them have the
// exponential distribution's mean 1 and variance 1, within 5 standard
// errors of 10^6 draws, and the share above 5 its exp(-5).
func TestNegLnMean(t *testing.T) {
	tab := negLnTable()
	r := rand.New(rand.NewPCG(3, 4))
	const n = 1000000
	var sum, sum2 float64
	over := 0
	for range n {
		x := r.Uint64()
		if x == 0 {
			continue
		}
		v := float64(negLnOf(&tab, x)) / (1 << 32)
		sum += v
		sum2 += v * v
		if v > 5 {
			over++
		}
	}
	mean := sum / n
	variance := sum2/n - mean*mean
	// The mean's standard error is 1/sqrt(n); the variance's sqrt(8/n)
	// (the fourth central moment of Exp(1) is 9).
	if math.Abs(mean-1) > 5/math.Sqrt(n) {
		t.Errorf("mean %v, want 1 within %v", mean, 5/math.Sqrt(n))
	}
	if math.Abs(variance-1) > 5*math.Sqrt(8.0/n) {
		t.Errorf("variance %v, want 1 within %v", variance, 5*math.Sqrt(8.0/n))
	}
	p := math.Exp(-5)
	if sd := math.Sqrt(n * p * (1 - p)); math.Abs(float64(over)-n*p) > 5*sd {
		t.Errorf("%d draws above 5, want %.0f within %.0f", over, n*p, 5*sd)
	}
}

// negLnOf mirrors the probes' -ln(x / 2^64) in units of 2^-32 (bpf/sample.h,
// sample_interval), for x not 0: the leading zero bits give ln(2) each,
// and the table, interpolated, the rest.
func negLnOf(t *[negLnSteps + 1]uint32, x uint64) uint64 {
	k := uint64(0)
	for x>>63 == 0 {
		k++
		x <<= 1
	}
	i := (x >> 53) & (negLnSteps - 1)
	frac := (x >> 21) & 0xffffffff
	hi, lo := uint64(t[i]), uint64(t[i+1])
	return k*ln2Q32 + hi - ((hi-lo)*frac)>>32
}

// ln2Q32 is ln(2) in units of 2^-32 (LN2_Q32 in bpf/sample.h).
const ln2Q32 = 2977044472
