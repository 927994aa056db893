//go:build linux

package session

import (
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/tracer"
)

// TestInjectThreshold: a process is taken once its hits have cost it
// 16 ms, a call costing an entry's hit and half a return's; the count
// stays within 1024 and 65536.
func TestInjectThreshold(t *testing.T) {
	for _, c := range []struct {
		entry, ret time.Duration
		want       uint32
	}{
		{1600 * time.Nanosecond, 800 * time.Nanosecond, 8000},
		{5 * time.Microsecond, 2 * time.Microsecond, 2666},
		{1 * time.Microsecond, 0, 16000},
		{20 * time.Microsecond, 10 * time.Microsecond, 1024},
		{100 * time.Nanosecond, 50 * time.Nanosecond, 65536},
		{0, 0, 65536},
	} {
		if got := injectThreshold(tracer.TrapCost{Entry: c.entry, Return: c.ret}); got != c.want {
			t.Errorf("entry %v, return %v: %d, want %d", c.entry, c.ret, got, c.want)
		}
	}
}

// TestRepriced: the count follows the median of the injections' prices
// once there are three, and changes only by more than a quarter.
func TestRepriced(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		prices []time.Duration
		per    time.Duration
		cur    uint64
		want   uint32
		med    time.Duration
		change bool
	}{
		// Two are too few.
		{[]time.Duration{3 * ms, 4 * ms}, 600 * time.Nanosecond, 26666, 26666, 0, false},
		// 4 ms at 0.6 µs a call: 6666 calls.
		{[]time.Duration{3 * ms, 4 * ms, 9 * ms}, 600 * time.Nanosecond, 26666, 6666, 4 * ms, true},
		// The median of four is the mean of the middle two.
		{[]time.Duration{2 * ms, 4 * ms, 6 * ms, 30 * ms}, time.Microsecond, 26666, 5000, 5 * ms, true},
		// Within a quarter of the count in use: no change.
		{[]time.Duration{14 * ms, 15 * ms, 16 * ms}, time.Microsecond, 16000, 15000, 15 * ms, false},
		{[]time.Duration{19 * ms, 20 * ms, 21 * ms}, time.Microsecond, 16000, 20000, 20 * ms, false},
		{[]time.Duration{20 * ms, 21 * ms, 22 * ms}, time.Microsecond, 16000, 21000, 21 * ms, true},
		// Bounded as the count measured at the start is.
		{[]time.Duration{ms / 10, ms / 10, ms / 10}, time.Microsecond, 16000, 1024, ms / 10, true},
		{[]time.Duration{ms, ms, ms}, 0, 16000, 16000, 0, false},
	} {
		n, med, change := repriced(c.prices, c.per, c.cur)
		if n != c.want || change != c.change || change && med != c.med {
			t.Errorf("prices %v at %v a call, count %d: %d, %v, %v; want %d, %v, %v", c.prices, c.per, c.cur, n, med, change, c.want, c.med, c.change)
		}
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[uint32]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th",
		21: "21st", 102: "102nd", 111: "111th", 1999: "1999th", 8192: "8192nd"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
