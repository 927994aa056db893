//go:build linux

package tracer

import (
	"testing"

	"github.com/mdtrace/mdtrace/unwind"
)

// TestPackRule: rules as bpf/unwind.h reads them; what an entry cannot
// hold is a stop.
func TestPackRule(t *testing.T) {
	for _, tc := range []struct {
		r    unwind.Rule
		want uint32
	}{
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 8, RA: -8}, 8 << 6},
		{unwind.Rule{Base: unwind.BaseRBP, Offset: 16, RBP: -16, RA: -8}, 1 | 16<<6 | 2<<22},
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 8, RA: -8, Stop: unwind.StopEnd}, 8<<6 | 1<<3},
		{unwind.Rule{Base: unwind.BasePLT, Offset: 11, RA: -8}, 2 | 11<<6},
		{unwind.Rule{Base: unwind.BaseSignal, RA: 168, Offset: 160, RBP: 120, Signal: true}, 4},
		{unwind.Rule{Base: unwind.BaseNone, Stop: unwind.StopNoFDE}, 3 | 2<<3},
		{unwind.Rule{Base: unwind.BaseNone, Stop: unwind.StopExpression}, 3 | 3<<3},
		// Beyond an entry: stops.
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 1 << 16, RA: -8}, 3 | unwind.StopLargeOffset<<3},
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 8, RA: -16}, 3 | unwind.StopLargeOffset<<3},
		{unwind.Rule{Base: unwind.BaseRBP, Offset: 16, RBP: -12, RA: -8}, 3 | unwind.StopLargeOffset<<3},
	} {
		if got := packRule(tc.r); got != tc.want {
			t.Errorf("packRule(%v) = %#x, want %#x", tc.r, got, tc.want)
		}
	}
}

// TestPathHash: FNV-1a 64, as bpf/unwind.h's path_hash, of at most 255
// bytes (the loader's names are read into 256 with their NUL).
func TestPathHash(t *testing.T) {
	if got := pathHash(""); got != 0xcbf29ce484222325 {
		t.Errorf("empty: %#x", got)
	}
	if got := pathHash("a"); got != 0xaf63dc4c8601ec8c {
		t.Errorf("a: %#x", got)
	}
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'x'
	}
	if pathHash(string(long)) != pathHash(string(long[:255])) {
		t.Error("bytes past 255 change the hash")
	}
}
