package output

import (
	"bufio"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// FoldedLine resolves a frame to its source file and line, for
// WriteFolded; ok is false when no line is known.
type FoldedLine func(pc uint64) (file string, line int, ok bool)

// WriteFolded writes the live bytes of snap as folded stacks, the input of
// flame graph tools and mdtrace's own format: one line per backtrace,
// frames from the outermost to the allocation site joined by ";", a
// space, and the bytes still allocated from that backtrace. A frame is its
// demangled function (or "MAP+0xRELPC" when unknown) with " (FILE:LINE)"
// after it where DWARF knows the line. Allocations without a backtrace
// count under "[no backtrace]"; a backtrace cut at the frame limit starts
// with "[truncated]". Lines are sorted by bytes, largest first.
func WriteFolded(w io.Writer, snap *leak.Snapshot, frames func([]uint64) []stacks.Frame, line FoldedLine) error {
	// Bytes, estimated when the snapshot is sampled.
	bytesBy := map[string]float64{}
	names := map[uint64]string{}
	for i := range snap.Allocs {
		a := &snap.Allocs[i]
		pcs := snap.Backtrace(a)
		if len(pcs) == 0 {
			bytesBy["[no backtrace]"] += float64(a.Size) * snap.Weight(a.Size)
			continue
		}
		key, ok := names[a.StackID]
		if !ok {
			fs := resolve(pcs, frames)
			parts := make([]string, len(fs))
			for j, f := range fs {
				parts[len(fs)-1-j] = foldedFrame(f, line)
			}
			key = strings.Join(parts, ";")
			if a.StackID&abi.StackIDTruncated != 0 {
				// Cut at the frame limit: its outermost frames are
				// not known, and it is not the complete stack with
				// the same frames.
				key = "[truncated];" + key
			}
			names[a.StackID] = key
		}
		bytesBy[key] += float64(a.Size) * snap.Weight(a.Size)
	}
	keys := make([]string, 0, len(bytesBy))
	for k := range bytesBy {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if bytesBy[keys[i]] != bytesBy[keys[j]] {
			return bytesBy[keys[i]] > bytesBy[keys[j]]
		}
		return keys[i] < keys[j]
	})
	bw := bufio.NewWriter(w)
	for _, k := range keys {
		bw.WriteString(k)
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatUint(uint64(math.Round(bytesBy[k])), 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// foldedFrame names one frame; a ";", which separates frames, becomes ","
// (tools split a line at its last space, so spaces may stay).
func foldedFrame(f stacks.Frame, line FoldedLine) string {
	var name string
	if f.Func != "" {
		name = stacks.Demangle(f.Func)
	} else {
		m := f.MapName
		if m == "" {
			m = unknownMap
		}
		name = filepath.Base(m) + "+0x" + strconv.FormatUint(f.RelPC, 16)
	}
	if line != nil {
		if file, n, ok := line(f.PC); ok {
			name += " (" + filepath.Base(file) + ":" + strconv.Itoa(n) + ")"
		}
	}
	return strings.NewReplacer(";", ",", "\n", " ").Replace(name)
}
