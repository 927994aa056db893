package output

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
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
	// Suppressed, when set, reports whether the leaked blocks of a
	// backtrace, by its resolved frames, are left out of the report. It
	// is asked once per distinct backtrace.
	Suppressed func(frames []stacks.Frame) bool
	// Reachable, when set, reports whether a leaked block is still
	// reachable from the process's roots: those are left out, and the
	// report lists only the unreachable ones (--unreachable-only).
	Reachable func(a *leak.Alloc) bool
	// ReachableToo, with Reachable, lists the reachable blocks too,
	// after the unreachable ones, each group under a line that says what
	// it holds (--unreachable-first).
	ReachableToo bool
	// MaxLeaks, when not 0, is how many blocks the report lists one by
	// one (--max-leaks); the rest are summed up by backtrace after them,
	// each backtrace once, with how many blocks and bytes it leaked. In a
	// classified report the rest of each part is summed up at its end.
	// The leaks are numbered "of" all of them, and the summary counts
	// them all.
	MaxLeaks uint64
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
//
// It puts snap.Allocs in SortList order (Sort) and goes through them
// twice, keeping of each block only a byte: what the first pass decided. Each distinct backtrace is
// resolved, checked against the suppressions and formatted once, and the
// log lines go out through a LogBuffer: a report of a million blocks takes
// about a second, in memory a few bytes per block beyond the snapshot's.
func LeakReportWith(l *Log, prog string, pid, tid int, snap *leak.Snapshot, frames func([]uint64) []stacks.Frame, opts LeakOptions) LeakSummary {
	snap.Sort()
	classify := opts.Reachable != nil && opts.ReachableToo
	sum := LeakSummary{UnreachableOnly: opts.Reachable != nil && !classify, Classified: classify}
	bts := newBacktraceCache(snap, frames, opts.Full, opts.Suppressed)
	// What the first pass decided of each block, by its place in order:
	// listed or not, and in a classified report, in which part.
	const (
		listed = 1 << iota
		listedReachable
	)
	marks := make([]uint8, len(snap.Allocs))
	for i := range snap.Allocs {
		if opts.Progress != nil && i > 0 && i%ProgressStep == 0 {
			opts.Progress("reading", i, len(snap.Allocs))
		}
		a := &snap.Allocs[i]
		reachable := opts.Reachable != nil && opts.Reachable(a)
		if reachable && !classify {
			sum.ReachableBlocks++
			sum.ReachableBytes += a.Size
			continue
		}
		if bts.get(a).suppressed {
			sum.SuppressedBlocks++
			sum.SuppressedBytes += a.Size
			continue
		}
		sum.Blocks++
		sum.Bytes += a.Size
		switch {
		case !classify:
			marks[i] = listed
		case reachable:
			sum.ReachableBlocks++
			sum.ReachableBytes += a.Size
			marks[i] = listedReachable
		default:
			sum.UnreachableBlocks++
			sum.UnreachableBytes += a.Size
			marks[i] = listed
		}
	}
	w := leakWriter{
		b: l.Buffer(), pid: pid, tid: tid, bts: bts, opts: opts, total: sum.Blocks,
		head: []byte("+++ " + prog + " leaked block of size "),
	}
	defer w.b.Flush()
	if classify {
		w.header(UnreachableHeader(sum.UnreachableBlocks, sum.UnreachableBytes))
	}
	w.write(snap, marks, listed)
	if classify {
		w.header(ReachableHeader(sum.ReachableBlocks, sum.ReachableBytes))
		w.write(snap, marks, listedReachable)
	}
	if opts.Progress != nil {
		opts.Progress("written", int(sum.Blocks), int(sum.Blocks))
	}
	return sum
}

// leakWriter writes the blocks of a leak report.
type leakWriter struct {
	b        *LogBuffer
	pid, tid int
	bts      *backtraceCache
	opts     LeakOptions
	// total is the number of blocks listed; done, how many are written.
	total, done uint64
	head        []byte // "+++ PROG leaked block of size "
	line        []byte
	// rest are the blocks beyond opts.MaxLeaks, by backtrace, in the
	// order of their first block.
	rest     []*restGroup
	restByID map[*backtraceInfo]*restGroup
}

// restGroup is the blocks of one backtrace beyond LeakOptions.MaxLeaks.
type restGroup struct {
	first                    *leak.Alloc // the first block, whose backtrace it is
	blocks, bytes            uint64
	smallest, largest, order uint64
}

func (w *leakWriter) header(msg string) {
	w.b.Stamp(w.pid, w.tid)
	w.b.Add(msg)
}

// write writes the blocks of snap whose mark is mark.
func (w *leakWriter) write(snap *leak.Snapshot, marks []uint8, mark uint8) {
	for i := range snap.Allocs {
		if marks[i] != mark {
			continue
		}
		if w.opts.Progress != nil && w.done > 0 && w.done%ProgressStep == 0 {
			w.opts.Progress("writing", int(w.done), int(w.total))
		}
		a := &snap.Allocs[i]
		w.done++
		if w.opts.MaxLeaks != 0 && w.done > w.opts.MaxLeaks {
			w.keep(a)
			continue
		}
		w.b.Stamp(w.pid, w.tid)
		w.line = append(w.line[:0], w.head...)
		w.line = strconv.AppendUint(w.line, a.Size, 10)
		w.line = append(w.line, " at 0x"...)
		w.line = strconv.AppendUint(w.line, a.Ptr, 16)
		w.line = append(w.line, " (leak "...)
		w.line = strconv.AppendUint(w.line, w.done, 10)
		w.line = append(w.line, " of "...)
		w.line = strconv.AppendUint(w.line, w.total, 10)
		w.line = append(w.line, ')')
		w.b.AddBytes(w.line)
		w.backtrace(a)
	}
	w.summary()
}

// backtraceLine is the line before a leaked block's frames.
const backtraceLine = "Backtrace at time of allocation:"

// backtrace writes a leaked block's backtrace, if it has one. A backtrace
// is one message, or with backtrace_full one message per frame: the same
// lines. The lines of a cached backtrace are kept with their header while
// it does not change (a millisecond, a thousand blocks or so), and copied
// at once: formatting each block's lines had been most of the report's
// own work.
func (w *leakWriter) backtrace(a *leak.Alloc) {
	bi := w.bts.get(a)
	if bi.cached && bi.lines == nil && !bi.noLines && bi.text != "" {
		// Room for its lines, or none: they are made each time then.
		n := len(bi.text) + len(backtraceLine) + 1 + (strings.Count(bi.text, "\n")+1)*len(w.b.header)
		if w.bts.linesKept+n <= maxCachedLines {
			bi.lines = make([]byte, 0, n)
			w.bts.linesKept += n
		} else {
			bi.noLines = true
		}
	}
	if !bi.cached || bi.noLines {
		if bt := w.bts.text(a); bt != "" {
			w.b.Add(backtraceLine)
			w.b.Add(bt)
		}
		return
	}
	if bi.text == "" {
		return
	}
	if bi.linesGen != w.b.headerGen {
		bi.lines = appendMessage(appendMessage(bi.lines[:0], w.b.header, backtraceLine), w.b.header, bi.text)
		bi.linesGen = w.b.headerGen
	}
	w.b.addLines(bi.lines)
}

// keep counts a block beyond opts.MaxLeaks with the others of its
// backtrace.
func (w *leakWriter) keep(a *leak.Alloc) {
	bi := w.bts.get(a)
	g := w.restByID[bi]
	if g == nil {
		if w.restByID == nil {
			w.restByID = map[*backtraceInfo]*restGroup{}
		}
		g = &restGroup{first: a, smallest: a.Size, largest: a.Size, order: uint64(len(w.rest))}
		w.restByID[bi] = g
		w.rest = append(w.rest, g)
	}
	g.blocks++
	g.bytes += a.Size
	g.smallest = min(g.smallest, a.Size)
	g.largest = max(g.largest, a.Size)
}

// summary writes the blocks kept by keep, by backtrace, most bytes first.
func (w *leakWriter) summary() {
	if len(w.rest) == 0 {
		return
	}
	var blocks, bytes uint64
	for _, g := range w.rest {
		blocks += g.blocks
		bytes += g.bytes
	}
	slices.SortFunc(w.rest, func(x, y *restGroup) int {
		if c := cmp.Compare(y.bytes, x.bytes); c != 0 {
			return c
		}
		if c := cmp.Compare(y.blocks, x.blocks); c != 0 {
			return c
		}
		return cmp.Compare(x.order, y.order)
	})
	w.b.Stamp(w.pid, w.tid)
	w.b.Add(fmt.Sprintf("mdtrace: %d more leaked block%s, %d bytes, beyond the first %d (--max-leaks), by backtrace, most bytes first:",
		blocks, plural(blocks), bytes, w.opts.MaxLeaks))
	for _, g := range w.rest {
		w.b.Stamp(w.pid, w.tid)
		sizes := strconv.FormatUint(g.smallest, 10)
		if g.largest != g.smallest {
			sizes += " to " + strconv.FormatUint(g.largest, 10)
		}
		bt := w.bts.text(g.first)
		if bt == "" {
			w.b.Add(fmt.Sprintf("mdtrace: %d block%s of size %s, %d bytes, without a backtrace", g.blocks, plural(g.blocks), sizes, g.bytes))
			continue
		}
		w.b.Add(fmt.Sprintf("mdtrace: %d block%s of size %s, %d bytes, with this backtrace:", g.blocks, plural(g.blocks), sizes, g.bytes))
		w.b.Add(bt)
	}
	w.rest, w.restByID = w.rest[:0], nil
}

// backtraceCache resolves, checks and formats each distinct backtrace of a
// snapshot once: a million leaked blocks commonly have a few hundred
// backtraces between them.
type backtraceCache struct {
	snap     *leak.Snapshot
	frames   func([]uint64) []stacks.Frame
	full     bool
	suppress func(frames []stacks.Frame) bool
	byID     map[uint64]*backtraceInfo
	// kept is how many bytes of formatted backtraces the cache holds:
	// beyond maxCachedBacktraces, a backtrace is formatted again each
	// time it is written, so that a report of millions of distinct
	// backtraces stays within its memory. linesKept is the same of their
	// log lines (leakWriter.backtrace), up to maxCachedLines.
	kept, linesKept int
}

// maxCachedBacktraces is how many bytes of formatted backtraces a report
// keeps, and maxCachedLines how many of their log lines.
const (
	maxCachedBacktraces = 32 << 20
	maxCachedLines      = 16 << 20
)

type backtraceInfo struct {
	suppressed bool
	// text is the formatted backtrace, when cached: one line per frame,
	// each ended by a newline; "" without frames.
	text   string
	cached bool
	// lines are its log lines, "Backtrace at time of allocation:" and
	// the frames, with the header of the LogBuffer's headerGen linesGen.
	lines    []byte
	linesGen uint64
	noLines  bool // no room was left for lines
}

func newBacktraceCache(snap *leak.Snapshot, frames func([]uint64) []stacks.Frame, full bool, suppress func([]stacks.Frame) bool) *backtraceCache {
	return &backtraceCache{snap: snap, frames: frames, full: full, suppress: suppress, byID: map[uint64]*backtraceInfo{}}
}

// get returns what is known of a's backtrace.
func (c *backtraceCache) get(a *leak.Alloc) *backtraceInfo {
	pcs := c.snap.Backtrace(a)
	id := a.StackID
	if len(pcs) == 0 {
		// Every block without frames shares one empty backtrace.
		id = 0
	}
	if bi, ok := c.byID[id]; ok {
		return bi
	}
	bi := &backtraceInfo{}
	c.byID[id] = bi
	fs := c.resolve(pcs)
	if c.suppress != nil && c.suppress(fs) {
		bi.suppressed = true
		return bi
	}
	if c.kept < maxCachedBacktraces {
		bi.text = c.format(fs)
		bi.cached = true
		c.kept += len(bi.text)
	}
	return bi
}

// text returns a's backtrace formatted.
func (c *backtraceCache) text(a *leak.Alloc) string {
	if bi := c.get(a); bi.cached {
		return bi.text
	}
	return c.format(c.resolve(c.snap.Backtrace(a)))
}

func (c *backtraceCache) resolve(pcs []uint64) []stacks.Frame {
	if len(pcs) == 0 {
		return nil
	}
	return resolve(pcs, c.frames)
}

func (c *backtraceCache) format(fs []stacks.Frame) string {
	if !c.full {
		return BacktraceString(fs)
	}
	var sb strings.Builder
	for j, f := range fs {
		sb.WriteString(FormatFrameFull(j, f))
		sb.WriteByte('\n')
	}
	return sb.String()
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
