package output

import (
	"fmt"
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
	return int(LeakReportWith(l, prog, pid, tid, snap, frames, LeakOptions{}).Blocks)
}

// LeakReportFull is LeakReport with the backtrace_full option: each frame is
// formatted with FormatFrameFull and logged on its own, as Android's
// UnwindLog does.
func LeakReportFull(l *Log, prog string, pid, tid int, snap *leak.Snapshot, frames func([]uint64) []stacks.Frame) int {
	return int(LeakReportWith(l, prog, pid, tid, snap, frames, LeakOptions{Full: true}).Blocks)
}

// LeakOptions are the choices of LeakReportWith.
type LeakOptions struct {
	// Full formats the frames as backtrace_full does (LeakReportFull).
	Full bool
	// Suppressed, when set, reports whether a leaked block, with its
	// resolved frames, is left out of the report.
	Suppressed func(a *leak.Alloc, frames []stacks.Frame) bool
	// Reachable, when set, reports whether a leaked block is still
	// reachable from the process's roots: those are left out, and the
	// report lists only the unreachable ones (--unreachable-only).
	Reachable func(a *leak.Alloc) bool
	// ReachableToo, with Reachable, lists the reachable blocks too,
	// after the unreachable ones, each group under a line that says what
	// it holds (--unreachable-first).
	ReachableToo bool
	// Progress, when set, is told every ProgressStep blocks how far the
	// report is, in its two phases: "reading" (the blocks' frames named
	// and checked against the suppressions) and "writing", then once
	// "written".
	Progress func(phase string, done, total int)
}

// ProgressStep is how many blocks a report goes through between two calls
// of LeakOptions.Progress.
const ProgressStep = 1 << 16

// LeakSummary counts what a leak report listed and what it left out.
type LeakSummary struct {
	Blocks, Bytes                     uint64
	SuppressedBlocks, SuppressedBytes uint64
	// UnreachableOnly says that Blocks and Bytes are the unreachable
	// leaks only; ReachableBlocks and ReachableBytes are those left out.
	UnreachableOnly bool
	// Classified says that the report listed the unreachable leaks,
	// UnreachableBlocks and UnreachableBytes of Blocks and Bytes, then the
	// reachable ones, ReachableBlocks and ReachableBytes.
	Classified                          bool
	ReachableBlocks, ReachableBytes     uint64
	UnreachableBlocks, UnreachableBytes uint64
}

// String is the report's bottom line: "N bytes in M leaked allocations",
// how many of them are unreachable when the report says it, and the
// suppressed ones if any.
func (s LeakSummary) String() string {
	line := fmt.Sprintf("%d bytes in %d leaked allocations", s.Bytes, s.Blocks)
	switch {
	case s.UnreachableOnly:
		line = fmt.Sprintf("%d bytes in %d unreachable leaked allocations (%d still reachable, %d bytes, not listed)",
			s.Bytes, s.Blocks, s.ReachableBlocks, s.ReachableBytes)
	case s.Classified:
		line += fmt.Sprintf(": %d bytes in %d unreachable, %d bytes in %d still reachable",
			s.UnreachableBytes, s.UnreachableBlocks, s.ReachableBytes, s.ReachableBlocks)
	}
	if s.SuppressedBlocks > 0 {
		line += fmt.Sprintf(" (%d suppressed, %d bytes)", s.SuppressedBlocks, s.SuppressedBytes)
	}
	return line
}

// LeakReportWith is LeakReport with options: the blocks opts.Suppressed
// leaves out are not listed, and the others are numbered among
// themselves. It returns what was listed and what was left out.
func LeakReportWith(l *Log, prog string, pid, tid int, snap *leak.Snapshot, frames func([]uint64) []stacks.Frame, opts LeakOptions) LeakSummary {
	list := snap.SortList()
	type listed struct {
		a      *leak.Alloc
		frames []stacks.Frame
	}
	classify := opts.Reachable != nil && opts.ReachableToo
	sum := LeakSummary{UnreachableOnly: opts.Reachable != nil && !classify, Classified: classify}
	kept := make([]listed, 0, len(list))
	// The reachable blocks of a classified report, listed after the
	// unreachable ones.
	var later []listed
	for i := range list {
		if opts.Progress != nil && i > 0 && i%ProgressStep == 0 {
			opts.Progress("reading", i, len(list))
		}
		a := &list[i]
		reachable := opts.Reachable != nil && opts.Reachable(a)
		if reachable && !classify {
			sum.ReachableBlocks++
			sum.ReachableBytes += a.Size
			continue
		}
		var fs []stacks.Frame
		if pcs := snap.Backtrace(a); len(pcs) > 0 {
			fs = resolve(pcs, frames)
		}
		if opts.Suppressed != nil && opts.Suppressed(a, fs) {
			sum.SuppressedBlocks++
			sum.SuppressedBytes += a.Size
			continue
		}
		sum.Blocks++
		sum.Bytes += a.Size
		switch {
		case !classify:
			kept = append(kept, listed{a, fs})
		case reachable:
			sum.ReachableBlocks++
			sum.ReachableBytes += a.Size
			later = append(later, listed{a, fs})
		default:
			sum.UnreachableBlocks++
			sum.UnreachableBytes += a.Size
			kept = append(kept, listed{a, fs})
		}
	}
	kept = append(kept, later...)
	b := l.Buffer()
	defer b.Flush()
	for i, k := range kept {
		if opts.Progress != nil && i > 0 && i%ProgressStep == 0 {
			opts.Progress("writing", i, len(kept))
		}
		if classify && i == 0 {
			b.Errorf(pid, tid, "%s", UnreachableHeader(sum.UnreachableBlocks, sum.UnreachableBytes))
		}
		if classify && uint64(i) == sum.UnreachableBlocks {
			b.Errorf(pid, tid, "%s", ReachableHeader(sum.ReachableBlocks, sum.ReachableBytes))
		}
		b.Errorf(pid, tid, "+++ %s leaked block of size %d at 0x%x (leak %d of %d)", prog, k.a.Size, k.a.Ptr, i+1, len(kept))
		if len(k.frames) == 0 {
			continue
		}
		b.Errorf(pid, tid, "Backtrace at time of allocation:")
		if !opts.Full {
			b.Errorf(pid, tid, "%s", BacktraceString(k.frames))
			continue
		}
		for j, f := range k.frames {
			b.Errorf(pid, tid, "%s", FormatFrameFull(j, f))
		}
	}
	if classify && len(kept) == 0 {
		b.Errorf(pid, tid, "%s", UnreachableHeader(0, 0))
	}
	if classify && sum.ReachableBlocks == 0 {
		b.Errorf(pid, tid, "%s", ReachableHeader(0, 0))
	}
	if opts.Progress != nil {
		opts.Progress("written", len(kept), len(kept))
	}
	return sum
}

// UnreachableHeader is the line of a classified leak report
// (--unreachable-first) before its unreachable blocks: those nothing in the
// process points to any more, which it can never free.
func UnreachableHeader(blocks, bytes uint64) string {
	return fmt.Sprintf("mdtrace: unreachable: %d leaked block%s, %d bytes, that nothing in the process points to any more",
		blocks, plural(blocks), bytes)
}

// ReachableHeader is the line of a classified leak report before its
// reachable blocks: those the process still holds, from its globals,
// stacks, registers or thread-local storage, directly or through other
// reachable blocks.
func ReachableHeader(blocks, bytes uint64) string {
	return fmt.Sprintf("mdtrace: still reachable: %d leaked block%s, %d bytes, that the process still points to (from its globals, stacks, registers or TLS, directly or through other blocks)",
		blocks, plural(blocks), bytes)
}

// Resolve turns pcs into frames with fn, filling in unresolved frames for
// any pc fn does not cover.
func Resolve(pcs []uint64, fn func([]uint64) []stacks.Frame) []stacks.Frame { return resolve(pcs, fn) }

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
