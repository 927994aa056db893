package output

import (
	"slices"
	"strings"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// LeakReport logs the report that Android's leak_track option writes when
// the process exits, and returns the number of leaks.
//
// For each allocation of snap in SortList order (not merged), it logs at
// error priority
//
//	+++ PROG leaked block of size SIZE at 0xPTR (leak I of N)
//
// and, when the allocation has a backtrace, "Backtrace at time of
// allocation:" followed by its frames formatted with FormatFrame, in one
// call as Android does. frames resolves the allocation's pcs; when it is
// nil, or returns fewer frames than pcs, the missing frames are shown
// unresolved ("<unknown>" map, the pc as relative pc).
//
// prog is the program name as Android's getprogname gives it: the full
// argv[0] of the traced process.
func LeakReport(l *Log, prog string, pid, tid int, snap *leak.Snapshot, frames func([]uint64) []stacks.Frame) int {
	return leakReport(l, prog, pid, tid, snap, frames, false)
}

// LeakReportFull is LeakReport with the backtrace_full option: each frame is
// formatted with FormatFrameFull and logged on its own, as Android's
// UnwindLog does.
func LeakReportFull(l *Log, prog string, pid, tid int, snap *leak.Snapshot, frames func([]uint64) []stacks.Frame) int {
	return leakReport(l, prog, pid, tid, snap, frames, true)
}

func leakReport(l *Log, prog string, pid, tid int, snap *leak.Snapshot, frames func([]uint64) []stacks.Frame, full bool) int {
	list := snap.SortList()
	b := l.Buffer()
	defer b.Flush()
	for i := range list {
		a := &list[i]
		b.Errorf(pid, tid, "+++ %s leaked block of size %d at 0x%x (leak %d of %d)", prog, a.Size, a.Ptr, i+1, len(list))
		pcs := snap.Backtrace(a)
		if len(pcs) == 0 {
			continue
		}
		b.Errorf(pid, tid, "Backtrace at time of allocation:")
		if !full {
			b.Errorf(pid, tid, "%s", BacktraceString(resolve(pcs, frames)))
			continue
		}
		for j, f := range resolve(pcs, frames) {
			b.Errorf(pid, tid, "%s", FormatFrameFull(j, f))
		}
	}
	return len(list)
}

// resolve turns pcs into frames with fn, filling in unresolved frames for
// any pc fn does not cover.
func resolve(pcs []uint64, fn func([]uint64) []stacks.Frame) []stacks.Frame {
	var fs []stacks.Frame
	if fn != nil {
		fs = fn(pcs)
	}
	fs = slices.Clip(fs[:min(len(fs), len(pcs))])
	for _, pc := range pcs[len(fs):] {
		fs = append(fs, stacks.Frame{PC: pc, RelPC: pc})
	}
	return fs
}

// BacktraceString formats frames as Android's backtrace_string: one
// FormatFrame line per frame, each ended by a newline.
func BacktraceString(frames []stacks.Frame) string {
	var sb strings.Builder
	for i, f := range frames {
		sb.WriteString(FormatFrame(i, f))
		sb.WriteByte('\n')
	}
	return sb.String()
}
