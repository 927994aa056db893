//go:build linux

package session

import (
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/tracer"
)

func TestLossLines(t *testing.T) {
	got := lossLines(tracer.Counters{TableFull: 3, StackFull: 2, StackCollision: 1, StackError: 4, StateError: 5, MissedReturn: 6, StackTruncated: 7, CallsUncounted: 8, UnwindNoList: 9, Allocs: 99}, 1000, 16)
	want := []string{
		"3 allocations were not tracked: the live table was full (--max-allocs 1000)",
		"2 backtraces were lost: the stack table was full",
		"1 backtraces were lost to hash collisions in the stack table",
		"4 backtraces could not be taken (the kernel could not walk the stack)",
		"5 allocator calls were missed: no per-thread storage",
		"6 allocator calls were missed: their return was not seen",
		"7 backtraces were cut at 16 frames with frames left (backtrace=16, up to 256, for more; marked [truncated] in --folded)",
		"8 allocator calls were not counted: the table of the processes' counts (16384) was full, and their processes were not given the shim",
		"9 backtraces may end before the outermost frame: taken before their process's unwind tables were in place, they followed frame pointers alone",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l := lossLines(tracer.Counters{Allocs: 5, Frees: 5}, 1, 16); len(l) != 0 {
		t.Errorf("no losses gave %q", l)
	}
}
