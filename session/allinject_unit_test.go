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

func TestOrdinal(t *testing.T) {
	for n, want := range map[uint32]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th",
		21: "21st", 102: "102nd", 111: "111th", 1999: "1999th", 8192: "8192nd"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
