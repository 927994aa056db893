//go:build linux

package tracer

import (
	"reflect"
	"testing"

	"github.com/mdtrace/mdtrace/abi"
)

// TestCountersOrder checks that Counters has a field for each counter of
// enum counter (abi/mdtrace_abi.h), in its order: field i holds counter i.
func TestCountersOrder(t *testing.T) {
	var vals [abi.CounterMax]uint64
	for i := range vals {
		vals[i] = uint64(i) + 1
	}
	c := reflect.ValueOf(countersOf(&vals))
	if c.NumField() != abi.CounterMax {
		t.Fatalf("Counters has %d fields for %d counters", c.NumField(), abi.CounterMax)
	}
	for i := range c.NumField() {
		if got := c.Field(i).Uint(); got != vals[i] {
			t.Errorf("Counters.%s holds counter %d, not %d", c.Type().Field(i).Name, got-1, i)
		}
	}
}
