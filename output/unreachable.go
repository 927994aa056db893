package output

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/unreach"
)

// UnreachableTag is the tag of libmemunreachable's log lines.
const UnreachableTag = "libmemunreachable"

// UnreachableABI is the ABI libmemunreachable's report names.
const UnreachableABI = "x86_64"

func plural(n uint64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// UnreachableSummary is the line libmemunreachable logs at error priority
// once a check is done: "N bytes in M allocations unreachable out of X
// bytes in Y allocations".
func UnreachableSummary(r *unreach.Report) string {
	return fmt.Sprintf("%d bytes in %d allocation%s unreachable out of %d bytes in %d allocation%s",
		r.LeakBytes, r.NumLeaks, plural(r.NumLeaks), r.AllocationBytes, r.NumAllocations, plural(r.NumAllocations))
}

// UnreachableLeakString formats a leak as libmemunreachable's
// Leak::ToString: its size and address, what it references, its similar
// leaks, its first bytes if contents is set, and its backtrace in
// Android's format (frames resolves the pcs; nil leaves them unresolved).
func UnreachableLeakString(l *unreach.Leak, contents bool, frames func([]uint64) []stacks.Frame) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %d bytes unreachable at %x\n", l.Size, l.Begin)
	if l.ReferencedCount > 0 {
		fmt.Fprintf(&b, "   referencing %d unreachable bytes in %d allocation%s\n", l.ReferencedSize, l.ReferencedCount, plural(l.ReferencedCount))
	}
	if l.SimilarCount > 0 {
		fmt.Fprintf(&b, "   and %d similar unreachable bytes in %d allocation%s\n", l.SimilarSize, l.SimilarCount, plural(l.SimilarCount))
		if l.SimilarReferencedCount > 0 {
			fmt.Fprintf(&b, "   referencing %d unreachable bytes in %d allocation%s\n", l.SimilarReferencedSize, l.SimilarReferencedCount, plural(l.SimilarReferencedCount))
		}
	}
	if contents {
		const perLine = 16
		n := min(l.Size, unreach.ContentsLength)
		if n == l.Size {
			b.WriteString("   contents:\n")
		} else {
			fmt.Fprintf(&b, "   first %d bytes of contents:\n", n)
		}
		data := l.Contents
		for i := uint64(0); i < n; i += perLine {
			b.WriteString("   ")
			b.WriteString(strconv.FormatUint(l.Begin+i, 16))
			b.WriteString(": ")
			j := i
			for ; j < n && j < i+perLine; j++ {
				fmt.Fprintf(&b, "%02x ", byteAt(data, j))
			}
			for ; j < i+perLine; j++ {
				b.WriteString("   ")
			}
			for j = i; j < n && j < i+perLine; j++ {
				c := byteAt(data, j)
				if c < ' ' || c >= 0x7f {
					c = '.'
				}
				b.WriteByte(c)
			}
			b.WriteByte('\n')
		}
	}
	if len(l.Backtrace) > 0 {
		b.WriteString(BacktraceString(resolve(l.Backtrace, frames)))
	}
	return b.String()
}

// byteAt is data[i], 0 for a block whose memory was not read.
func byteAt(data []byte, i uint64) byte {
	if i < uint64(len(data)) {
		return data[i]
	}
	return 0
}

// UnreachableString formats a report as libmemunreachable's
// UnreachableMemoryInfo::ToString (what GetUnreachableMemoryString and
// dumpsys meminfo --unreachable print).
func UnreachableString(r *unreach.Report, contents bool, frames func([]uint64) []stacks.Frame) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %d bytes in %d unreachable allocation%s\n", r.LeakBytes, r.NumLeaks, plural(r.NumLeaks))
	fmt.Fprintf(&b, "  ABI: '%s'\n\n", UnreachableABI)
	for i := range r.Leaks {
		b.WriteString(UnreachableLeakString(&r.Leaks[i], contents, frames))
		b.WriteByte('\n')
	}
	return b.String()
}

// UnreachableSteps are libmemunreachable's information lines, in the order
// a check logs them (the first two with the process's PID).
var UnreachableSteps = struct {
	Collecting, Searching, SearchDone, Sweeping, SweepDone, Folding, FoldDone, CollectionDone, Done string
}{
	"collecting thread info for process %d...", "searching process %d for allocations", "searching done",
	"sweeping process %d for unreachable memory", "sweeping done", "folding related leaks", "folding done",
	"collection thread done", "unreachable memory detection done",
}

// LogUnreachable logs a check's outcome as LogUnreachableMemory does: the
// summary line, then each leak's Leak::ToString in one message, all at
// error priority with libmemunreachable's tag.
func LogUnreachable(l *Log, pid, tid int, r *unreach.Report, contents bool, frames func([]uint64) []stacks.Frame) {
	ul := l.Tagged(UnreachableTag)
	b := ul.Buffer()
	defer b.Flush()
	b.Errorf(pid, tid, "%s", UnreachableSummary(r))
	for i := range r.Leaks {
		b.Errorf(pid, tid, "%s", UnreachableLeakString(&r.Leaks[i], contents, frames))
	}
}
