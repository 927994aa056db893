//go:build linux

package tracer

import (
	"errors"
	"testing"
	"time"
)

// TestMeasureTrapCost: the hits are measured, each between what the
// fastest kernel entry could cost and what no machine's trap costs.
func TestMeasureTrapCost(t *testing.T) {
	needProbes(t)
	c, err := MeasureTrapCost()
	if errors.Is(err, ErrCoarseClock) {
		t.Skipf("no measure here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("entry %v, return %v, a call %v", c.Entry, c.Return, c.PerCall())
	for _, d := range []time.Duration{c.Entry, c.Return} {
		if d < 50*time.Nanosecond || d > time.Millisecond {
			t.Errorf("a hit measured %v: entry %v, return %v", d, c.Entry, c.Return)
		}
	}
}
