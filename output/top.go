package output

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// TopFrames is how many frames name a site in the top view.
const TopFrames = 4

// ClearScreen moves a terminal's cursor home and clears it, so that each
// top view replaces the last one.
const ClearScreen = "\x1b[H\x1b[2J"

// WriteTopSites writes the top view of one process: its totals, then a line
// for each of the first n sites (leak.Snapshot.Sites' order), each named by
// its innermost frames (the allocation's caller first) joined by " <- ".
func WriteTopSites(w io.Writer, pid int, prog string, when time.Time, sites []leak.Site, total leak.Site, n int, frames func([]uint64) []stacks.Frame) error {
	top := sites[:min(n, len(sites))]
	var b strings.Builder
	fmt.Fprintf(&b, "mdtrace: process %d (%s) at %s: %d live blocks, %d bytes; top %d of %d allocation sites:\n",
		pid, prog, when.Format("15:04:05"), total.Blocks, total.Bytes, len(top), len(sites))
	fmt.Fprintf(&b, "%12s %10s  %s\n", "BYTES", "BLOCKS", "SITE")
	for _, s := range top {
		fmt.Fprintf(&b, "%12d %10d  %s\n", s.Bytes, s.Blocks, siteName(s.Frames, frames))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// siteName names a site by its first TopFrames frames.
func siteName(pcs []uint64, frames func([]uint64) []stacks.Frame) string {
	if len(pcs) == 0 {
		return "[no backtrace]"
	}
	fs := resolve(pcs[:min(len(pcs), TopFrames)], frames)
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = foldedFrame(f, nil)
	}
	return strings.Join(names, " <- ")
}

// LiveSites is the view of a process's live blocks that mdtrace prints
// when it stops with the backtrace option alone: the sites (backtraces)
// with the most live bytes, each with its frames in full, then a bottom
// line.
type LiveSites struct {
	PID  int
	Prog string
	// Since says what the blocks are: "since tracing began" (attached)
	// or "at exit".
	Since string
	// Sites are in leak.Snapshot.Sites' order, the suppressed ones out;
	// Total adds them up; Suppressed counts those left out.
	Sites      []leak.Site
	Total      leak.Site
	Suppressed leak.Site
	// N is how many sites are shown.
	N int
}

// WriteLiveSites writes v, each frame formatted as the leak report's.
func WriteLiveSites(w io.Writer, v LiveSites, frames func([]uint64) []stacks.Frame) error {
	top := v.Sites[:min(v.N, len(v.Sites))]
	var b strings.Builder
	// Without a block, the bottom line alone: a heading with no site
	// under it would read as a list cut short.
	if len(top) > 0 {
		fmt.Fprintf(&b, "mdtrace: process %d (%s): blocks live %s, the %d backtraces with the most bytes of %d:\n", v.PID, v.Prog, v.Since, len(top), len(v.Sites))
	}
	for _, s := range top {
		fmt.Fprintf(&b, "%d bytes in %d allocations:\n", s.Bytes, s.Blocks)
		if len(s.Frames) == 0 {
			b.WriteString("          [no backtrace]\n")
			continue
		}
		b.WriteString(BacktraceString(resolve(s.Frames, frames)))
	}
	fmt.Fprintf(&b, "mdtrace: process %d (%s): %d bytes in %d allocations live %s", v.PID, v.Prog, v.Total.Bytes, v.Total.Blocks, v.Since)
	if v.Suppressed.Blocks > 0 {
		fmt.Fprintf(&b, " (%d suppressed, %d bytes)", v.Suppressed.Blocks, v.Suppressed.Bytes)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}
