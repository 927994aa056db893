package output

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

func TestLeakReportGolden(t *testing.T) {
	snap := &leak.Snapshot{
		PID: 7412,
		Allocs: []leak.Alloc{
			{Ptr: 0x55d0c2a412a0, Size: 100, StackID: 1},
			{Ptr: 0x55d0c2a41ec0, Size: 24}, // no backtrace
			{Ptr: 0x55d0c2a41310, Size: 128, StackID: 2},
			{Ptr: 0x55d0c2a41ab0, Size: 1024, StackID: 3},
		},
		Stacks: map[uint64][]uint64{
			1: {0x1000, 0x2000, 0x3000},
			2: {0xa000, 0xb000, 0xc000, 0xd000},
			3: {0xfe000, 0xde000, 0xce000, 0xbe000, 0xae000},
		},
		BacktraceSize: 16,
	}
	known := map[uint64]stacks.Frame{
		0x2000: {PC: 0x2000, RelPC: 0x1139, MapName: "/usr/local/bin/malloc_testing", Func: "main", FuncOff: 41},
		0x3000: {PC: 0x3000, RelPC: 0x271ca, MapName: "/usr/lib/x86_64-linux-gnu/libc.so.6", Func: "__libc_start_call_main", FuncOff: 122},
		0xa000: {PC: 0xa000, RelPC: 0x29310, MapName: "/system/lib/libc.so"},
		0xb000: {PC: 0xb000, RelPC: 0x21438, MapName: "/system/lib/libc.so", Func: "newlocale", FuncOff: 160},
		0xc000: {PC: 0xc000, RelPC: 0xa9e38, MapName: "/system/app/Foo.apk", ElfOffset: 0x5000, Func: "_ZN3foo3barEv", FuncOff: 12},
		0xd000: {PC: 0xd000, RelPC: 0xa28a8, MapName: "/system/app/Foo.apk", ElfOffset: 0x5000},
	}
	frames := func(pcs []uint64) []stacks.Frame {
		// The third stack stays unresolved: frames returns nothing for it.
		if pcs[0] == 0xfe000 {
			return nil
		}
		var fs []stacks.Frame
		for _, pc := range pcs {
			f, ok := known[pc]
			if !ok {
				f = stacks.Frame{PC: pc, RelPC: pc}
			}
			fs = append(fs, f)
		}
		return fs
	}
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.SetClock(fixedClock)
	if n := LeakReport(l, "/usr/local/bin/malloc_testing", 7412, 7412, snap, frames); n != 4 {
		t.Errorf("LeakReport = %d, want 4", n)
	}
	checkGolden(t, "leak_report.txt", buf.Bytes())

	// Classified (--unreachable-first): the unreachable blocks first,
	// then the reachable ones, each group in Android's order under its
	// line, numbered as one report.
	buf.Reset()
	reachable := func(a *leak.Alloc) bool { return a.Ptr == 0x55d0c2a41310 || a.Ptr == 0x55d0c2a41ec0 }
	sum := LeakReportWith(l, "/usr/local/bin/malloc_testing", 7412, 7412, snap, frames, LeakOptions{Reachable: reachable, ReachableToo: true})
	checkGolden(t, "leak_report_classified.txt", buf.Bytes())
	if got, want := sum.String(), "1276 bytes in 4 leaked allocations: 1124 bytes in 2 unreachable, 152 bytes in 2 still reachable"; got != want {
		t.Errorf("bottom line %q, want %q", got, want)
	}
	// --unreachable-only: the reachable ones counted, not listed.
	buf.Reset()
	sum = LeakReportWith(l, "/usr/local/bin/malloc_testing", 7412, 7412, snap, frames, LeakOptions{Reachable: reachable})
	if got, want := sum.String(), "1124 bytes in 2 unreachable leaked allocations (2 still reachable, 152 bytes, not listed)"; got != want {
		t.Errorf("bottom line %q, want %q", got, want)
	}
	if n := bytes.Count(buf.Bytes(), []byte("leaked block of size")); n != 2 || bytes.Contains(buf.Bytes(), []byte("mdtrace:")) {
		t.Errorf("--unreachable-only lists %d blocks, want 2 and no classifying lines:\n%s", n, buf.Bytes())
	}
}

// TestLeakReportClassifiedEmpty: a classified report says both groups'
// counts even when one or both are empty.
func TestLeakReportClassifiedEmpty(t *testing.T) {
	snap := &leak.Snapshot{PID: 5, Allocs: []leak.Alloc{{Ptr: 0x1000, Size: 8}}}
	for _, tc := range []struct {
		reachable bool
		want      string
	}{
		{true, "E malloc_debug: mdtrace: unreachable: 0 leaked blocks, 0 bytes, that nothing in the process points to any more\n" +
			"E malloc_debug: mdtrace: still reachable: 1 leaked block, 8 bytes, that the process still points to (from its globals, stacks, registers or TLS, directly or through other blocks)\n" +
			"E malloc_debug: +++ prog leaked block of size 8 at 0x1000 (leak 1 of 1)\n"},
		{false, "E malloc_debug: mdtrace: unreachable: 1 leaked block, 8 bytes, that nothing in the process points to any more\n" +
			"E malloc_debug: +++ prog leaked block of size 8 at 0x1000 (leak 1 of 1)\n" +
			"E malloc_debug: mdtrace: still reachable: 0 leaked blocks, 0 bytes, that the process still points to (from its globals, stacks, registers or TLS, directly or through other blocks)\n"},
	} {
		var buf bytes.Buffer
		l := NewLog(&buf)
		l.SetClock(fixedClock)
		LeakReportWith(l, "prog", 5, 5, snap, nil, LeakOptions{Reachable: func(*leak.Alloc) bool { return tc.reachable }, ReachableToo: true})
		var got strings.Builder
		for _, line := range strings.SplitAfter(buf.String(), "\n") {
			if i := strings.Index(line, " E "); i >= 0 {
				got.WriteString(line[i+1:])
			}
		}
		if got.String() != tc.want {
			t.Errorf("reachable %v:\n%s\nwant:\n%s", tc.reachable, got.String(), tc.want)
		}
	}
}

// TestLeakReportAndroid ports leak_track_no_frees: no backtrace, one line
// per leak, biggest first.
func TestLeakReportAndroid(t *testing.T) {
	snap := &leak.Snapshot{Allocs: []leak.Alloc{
		{Ptr: 0x1000, Size: 200},
		{Ptr: 0x2000, Size: 128},
		{Ptr: 0x3000, Size: 1024},
	}}
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.SetClock(fixedClock)
	if n := LeakReport(l, "malloc_testing", 1, 1, snap, nil); n != 3 {
		t.Errorf("LeakReport = %d, want 3", n)
	}
	h := "04-15 12:35:33.304     1     1 E malloc_debug: "
	want := h + "+++ malloc_testing leaked block of size 1024 at 0x3000 (leak 1 of 3)\n" +
		h + "+++ malloc_testing leaked block of size 200 at 0x1000 (leak 2 of 3)\n" +
		h + "+++ malloc_testing leaked block of size 128 at 0x2000 (leak 3 of 3)\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}

	buf.Reset()
	if n := LeakReport(l, "malloc_testing", 1, 1, &leak.Snapshot{}, nil); n != 0 || buf.Len() != 0 {
		t.Errorf("empty snapshot: LeakReport = %d, logged %q", n, buf.String())
	}
}

// TestLeakReportEmptyStack checks that an allocation whose backtrace came
// out empty prints no "Backtrace at time of allocation:", and that frames
// beyond the backtrace size are not shown.
func TestLeakReportEmptyStack(t *testing.T) {
	snap := &leak.Snapshot{
		Allocs:        []leak.Alloc{{Ptr: 0x10, Size: 8, StackID: 1}, {Ptr: 0x20, Size: 4, StackID: 2}},
		Stacks:        map[uint64][]uint64{1: {}, 2: {0x1, 0x2, 0x3}},
		BacktraceSize: 2,
	}
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.SetClock(fixedClock)
	LeakReport(l, "p", 1, 1, snap, nil)
	h := "04-15 12:35:33.304     1     1 E malloc_debug: "
	want := h + "+++ p leaked block of size 8 at 0x10 (leak 1 of 2)\n" +
		h + "+++ p leaked block of size 4 at 0x20 (leak 2 of 2)\n" +
		h + "Backtrace at time of allocation:\n" +
		h + "          #00  pc 0000000000000001  <unknown>\n" +
		h + "          #01  pc 0000000000000002  <unknown>\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestLeakReportFull(t *testing.T) {
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.SetClock(func() time.Time { return time.Date(2026, 4, 15, 12, 35, 33, 304e6, time.UTC) })
	snap := &leak.Snapshot{
		Allocs:        []leak.Alloc{{Ptr: 0x1000, Size: 24, StackID: 1}},
		Stacks:        map[uint64][]uint64{1: {0x5010, 0x6020}},
		BacktraceSize: 16,
	}
	frames := func(pcs []uint64) []stacks.Frame {
		return []stacks.Frame{
			{PC: pcs[0], RelPC: 0x10, MapName: "/system/lib64/libc.so", Func: "malloc", FuncOff: 16},
			{PC: pcs[1], RelPC: 0x20, MapName: "/system/bin/app"},
		}
	}
	LeakReportFull(l, "app", 7412, 7412, snap, frames)
	want := "04-15 12:35:33.304  7412  7412 E malloc_debug: +++ app leaked block of size 24 at 0x1000 (leak 1 of 1)\n" +
		"04-15 12:35:33.304  7412  7412 E malloc_debug: Backtrace at time of allocation:\n" +
		"04-15 12:35:33.304  7412  7412 E malloc_debug:           #0  pc 0000000000000010  /system/lib64/libc.so (malloc+16)\n" +
		"04-15 12:35:33.304  7412  7412 E malloc_debug:           #1  pc 0000000000000020  /system/bin/app\n"
	if buf.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// TestLeakReportMaxLeaks: with MaxLeaks, the first blocks are listed in
// Android's format, numbered of all of them, and the rest are summed up by
// backtrace, most bytes first, each backtrace once; the summary counts
// them all. Each backtrace is resolved and checked against the
// suppressions once, however many blocks have it.
func TestLeakReportMaxLeaks(t *testing.T) {
	snap := &leak.Snapshot{
		PID: 7412,
		Allocs: []leak.Alloc{
			{Ptr: 0x1000, Size: 100, StackID: 1},
			{Ptr: 0x2000, Size: 64, StackID: 2},
			{Ptr: 0x3000, Size: 64, StackID: 1},
			{Ptr: 0x4000, Size: 48, StackID: 2},
			{Ptr: 0x5000, Size: 40, StackID: 1},
			{Ptr: 0x6000, Size: 32, StackID: 2},
			{Ptr: 0x7000, Size: 24},
			{Ptr: 0x8000, Size: 24},
			{Ptr: 0x9000, Size: 16, StackID: 3}, // suppressed
			{Ptr: 0xa000, Size: 8, StackID: 3},  // suppressed
			{Ptr: 0xb000, Size: 8, StackID: 2},
		},
		Stacks: map[uint64][]uint64{
			1: {0x1100, 0x2200},
			2: {0x1100, 0x3300},
			3: {0x4400},
		},
		BacktraceSize: 16,
	}
	resolved := map[uint64]int{}
	frames := func(pcs []uint64) []stacks.Frame {
		resolved[pcs[len(pcs)-1]]++
		var fs []stacks.Frame
		for _, pc := range pcs {
			fs = append(fs, stacks.Frame{PC: pc, RelPC: pc - 0x1000, MapName: "/usr/bin/prog", Func: fmt.Sprintf("f%x", pc), FuncOff: 4})
		}
		return fs
	}
	checked := 0
	suppressed := func(fs []stacks.Frame) bool {
		checked++
		return len(fs) == 1 && fs[0].PC == 0x4400
	}
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.SetClock(fixedClock)
	sum := LeakReportWith(l, "/usr/bin/prog", 7412, 7412, snap, frames, LeakOptions{MaxLeaks: 3, Suppressed: suppressed})
	l.Errorf(7412, 7412, "mdtrace: %s", sum)
	checkGolden(t, "leak_report_max_leaks.txt", buf.Bytes())
	if want := (LeakSummary{Blocks: 9, Bytes: 404, SuppressedBlocks: 2, SuppressedBytes: 24}); sum != want {
		t.Errorf("summary %+v, want %+v", sum, want)
	}
	for pc, n := range resolved {
		if n != 1 {
			t.Errorf("the backtrace ending at %#x was resolved %d times, want once", pc, n)
		}
	}
	if checked != 4 {
		t.Errorf("%d suppression checks, want 4: one per backtrace and one for the blocks without", checked)
	}
}

// TestLeakReportClockMoves: the lines of a block all carry the time read
// for it, as the time moves on during the report, and say what they say
// with a clock that stands still.
func TestLeakReportClockMoves(t *testing.T) {
	snap := &leak.Snapshot{PID: 9, Stacks: map[uint64][]uint64{1: {0x10, 0x20}, 2: {0x30}}, BacktraceSize: 16}
	for i := range 60 {
		snap.Allocs = append(snap.Allocs, leak.Alloc{Ptr: uint64(0x1000 + 16*i), Size: uint64(8 + i%5), StackID: uint64(i%3) % 3})
	}
	frames := func(pcs []uint64) []stacks.Frame {
		var fs []stacks.Frame
		for _, pc := range pcs {
			fs = append(fs, stacks.Frame{PC: pc, RelPC: pc, MapName: "/bin/x", Func: "f", FuncOff: pc})
		}
		return fs
	}
	report := func(clock func() time.Time) string {
		var buf bytes.Buffer
		l := NewLog(&buf)
		l.SetClock(clock)
		LeakReport(l, "/bin/x", 9, 9, snap, frames)
		return buf.String()
	}
	still := report(fixedClock)
	now := fixedClock()
	moving := report(func() time.Time {
		now = now.Add(700 * time.Microsecond)
		return now
	})
	const stampLen = len("04-15 12:35:33.304")
	strip := func(s string) string {
		var b strings.Builder
		for line := range strings.Lines(s) {
			b.WriteString(line[stampLen:])
		}
		return b.String()
	}
	if strip(moving) != strip(still) {
		t.Fatalf("the report with a moving clock differs from the one with a clock that stands still:\n%s", moving)
	}
	stamps := map[string]bool{}
	var blockStamp string
	for line := range strings.Lines(moving) {
		stamp := line[:stampLen]
		stamps[stamp] = true
		if strings.Contains(line, "+++ ") {
			blockStamp = stamp
		} else if stamp != blockStamp {
			t.Fatalf("a line stamped %s in a block stamped %s: %q", stamp, blockStamp, line)
		}
	}
	if len(stamps) < 20 {
		t.Errorf("%d stamps in the report, want one a block or so", len(stamps))
	}
}
