//go:build linux

package session

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/tracer"
)

func TestStatsLines(t *testing.T) {
	snap := &leak.Snapshot{Allocs: []leak.Alloc{{Size: 1}, {Size: 16}, {Size: 17}, {Size: 4096}, {Size: 1 << 20}, {Size: 1<<20 + 1}}}
	got := statsLines("prog", snap, tracer.Counters{Allocs: 300, Frees: 294}, 2*time.Second)
	want := []string{
		"Logging allocator stats...",
		"prog: 6 live blocks, 2101283 bytes",
		"prog: 300 allocations and 294 frees in 2.0 s, 150/s and 147/s (every process traced)",
		"prog: live blocks by size: <=16: 2, <=64: 1, <=256: 0, <=1K: 0, <=4K: 1, <=16K: 0, <=64K: 0, <=256K: 0, <=1M: 1, >1M: 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
