package output

import (
	"bytes"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/unreach"
)

func unreachableFixture() (*unreach.Report, func([]uint64) []stacks.Frame) {
	r := &unreach.Report{NumAllocations: 10, AllocationBytes: 1000, NumLeaks: 7, LeakBytes: 316, Leaks: []unreach.Leak{
		{Begin: 0x7f0000001000, Size: 100, ReferencedCount: 2, ReferencedSize: 48, SimilarCount: 1, SimilarSize: 100,
			SimilarReferencedCount: 2, SimilarReferencedSize: 48, TotalSize: 296,
			Contents: []byte("Hello, world! 0123456789abcdef\x00\xff"), Backtrace: []uint64{0x7f1234, 0x555678}},
		{Begin: 0x7f0000002000, Size: 20, TotalSize: 20, Contents: []byte("short\n\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0aABCD")},
	}}
	frames := func(pcs []uint64) []stacks.Frame {
		return []stacks.Frame{
			{PC: 0x7f1234, RelPC: 0x1234, MapName: "/usr/lib/libfoo.so", Func: "make_leak", FuncOff: 20},
			{PC: 0x555678, RelPC: 0x5678, MapName: "/usr/bin/prog", Func: "main", FuncOff: 8},
		}[:len(pcs)]
	}
	return r, frames
}

// TestUnreachableString: libmemunreachable's report, contents and all,
// against a golden file written from its Leak::ToString.
func TestUnreachableString(t *testing.T) {
	r, frames := unreachableFixture()
	checkGolden(t, "unreachable_report.txt", []byte(UnreachableString(r, true, frames)))
	// Without contents, no contents lines.
	got := UnreachableString(r, false, frames)
	if bytes.Contains([]byte(got), []byte("contents")) || !bytes.Contains([]byte(got), []byte("  20 bytes unreachable at 7f0000002000\n\n")) {
		t.Errorf("without contents:\n%s", got)
	}
}

func TestLogUnreachable(t *testing.T) {
	r, frames := unreachableFixture()
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.SetClock(func() time.Time { return time.Date(2024, 3, 5, 14, 7, 9, 42e6, time.Local) })
	LogUnreachable(l, 123, 124, r, false, frames)
	want := "03-05 14:07:09.042   123   124 E libmemunreachable: 316 bytes in 7 allocations unreachable out of 1000 bytes in 10 allocations\n" +
		"03-05 14:07:09.042   123   124 E libmemunreachable:   100 bytes unreachable at 7f0000001000\n" +
		"03-05 14:07:09.042   123   124 E libmemunreachable:    referencing 48 unreachable bytes in 2 allocations\n" +
		"03-05 14:07:09.042   123   124 E libmemunreachable:    and 100 similar unreachable bytes in 1 allocation\n" +
		"03-05 14:07:09.042   123   124 E libmemunreachable:    referencing 48 unreachable bytes in 2 allocations\n" +
		"03-05 14:07:09.042   123   124 E libmemunreachable:           #00  pc 0000000000001234  /usr/lib/libfoo.so (make_leak+20)\n" +
		"03-05 14:07:09.042   123   124 E libmemunreachable:           #01  pc 0000000000005678  /usr/bin/prog (main+8)\n" +
		"03-05 14:07:09.042   123   124 E libmemunreachable:   20 bytes unreachable at 7f0000002000\n"
	if buf.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
	// One allocation: no plural.
	one := &unreach.Report{NumLeaks: 1, LeakBytes: 8, NumAllocations: 1, AllocationBytes: 8}
	if got := UnreachableSummary(one); got != "8 bytes in 1 allocation unreachable out of 8 bytes in 1 allocation" {
		t.Errorf("summary %q", got)
	}
}
