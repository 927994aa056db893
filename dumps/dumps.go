// Package dumps reads Android Native Heap Dumps (mdtrace's, or a device's)
// and turns them into what a developer reads: totals and allocations by
// backtrace, symbolized, as text, folded stacks or a pprof profile, and
// the growth between two dumps of one process.
package dumps

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
)

// Dump is a heap dump read, with its maps parsed and its frames
// symbolized; its records are added up by backtrace (Sites), not kept.
type Dump struct {
	Path string
	*output.ParsedHeapDump
	Maps *stacks.Maps
	// Sites are the allocations by backtrace, the most bytes first.
	Sites []Site
	// RecordCount is the number of records of the dump.
	RecordCount int
	// Bytes and Allocs are the totals of the records.
	Bytes, Allocs uint64
	// Zygote are the bytes and allocations of the zygote's blocks.
	ZygoteBytes, ZygoteAllocs uint64
}

// Site is the allocations of one backtrace.
type Site struct {
	PCs    []uint64
	Frames []stacks.Frame
	Bytes  uint64
	Allocs uint64
}

// Read reads and symbolizes the heap dump at path with sym. A record's
// bt_info line, when the dump has them (backtrace_full), names its frames
// in place of sym.
func Read(path string, sym *stacks.Symbolizer) (*Dump, error) {
	return ReadProgress(path, sym, nil)
}

// ReadProgress is Read telling progress, when set, how far it is: every
// output.ProgressStep records "reading" (of the header's count), then
// every output.ProgressStep backtraces "naming" their frames. The dump is
// read a record at a time: what it keeps is one Site a backtrace.
func ReadProgress(path string, sym *stacks.Symbolizer, progress func(phase string, done, total int)) (*Dump, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	d := &Dump{Path: path}
	bySite := map[string]*Site{}
	var key []byte
	record := func(r *output.ParsedRecord) error {
		key = key[:0]
		for _, pc := range r.Frames {
			key = binary.LittleEndian.AppendUint64(key, pc)
		}
		s := bySite[string(key)]
		if s == nil {
			s = &Site{PCs: r.Frames}
			if r.HasBtInfo {
				s.Frames = btInfoFrames(r.Frames, r.BtInfo)
			}
			bySite[string(key)] = s
		}
		s.Bytes += r.Size * r.Num
		s.Allocs += r.Num
		d.Bytes += r.Size * r.Num
		d.Allocs += r.Num
		if r.Zygote {
			d.ZygoteBytes += r.Size * r.Num
			d.ZygoteAllocs += r.Num
		}
		return nil
	}
	var reading func(done, total int)
	if progress != nil {
		reading = func(done, total int) { progress("reading", done, total) }
	}
	p, n, err := output.ScanHeapDump(f, record, reading)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d.ParsedHeapDump, d.RecordCount = p, n
	if d.Maps, err = stacks.ParseMaps([]byte(p.Maps)); err != nil {
		return nil, fmt.Errorf("%s: the MAPS section: %w", path, err)
	}
	d.Sites = make([]Site, 0, len(bySite))
	for _, s := range bySite {
		if s.Frames == nil {
			// A dump's process is gone, or on another machine: its
			// files by their paths (or under --symbols).
			s.Frames = sym.Symbolize(0, d.Maps, s.PCs)
		}
		d.Sites = append(d.Sites, *s)
		if progress != nil && len(d.Sites)%output.ProgressStep == 0 {
			progress("naming", len(d.Sites), len(bySite))
		}
	}
	slices.SortFunc(d.Sites, func(a, b Site) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Allocs, a.Allocs); c != 0 {
			return c
		}
		return slices.Compare(a.PCs, b.PCs)
	})
	return d, nil
}

// btInfoFrames names frames from a record's bt_info line: for each frame,
// {"map" relpc "function" offset}, as backtrace_full writes it.
func btInfoFrames(pcs []uint64, info string) []stacks.Frame {
	frames := make([]stacks.Frame, len(pcs))
	fields := parseBtInfo(info)
	for i, pc := range pcs {
		frames[i] = stacks.Frame{PC: pc, RelPC: pc}
		if i < len(fields) {
			f := fields[i]
			frames[i].MapName, frames[i].RelPC, frames[i].Func, frames[i].FuncOff = f.mapName, f.relPC, f.fn, f.off
		}
	}
	return frames
}

type btInfoFrame struct {
	mapName, fn string
	relPC, off  uint64
}

// parseBtInfo reads the {"MAP" RELPC "FUNC" OFF} groups of a bt_info line
// (RELPC and OFF in hex; FUNC may hold braces, a lambda's name); what it
// cannot read ends it.
func parseBtInfo(s string) []btInfoFrame {
	var out []btInfoFrame
	for {
		s = strings.TrimLeft(s, " ")
		if !strings.HasPrefix(s, "{") {
			return out
		}
		var f btInfoFrame
		var ok bool
		if f.mapName, s, ok = quoted(s[1:]); !ok {
			return out
		}
		if f.relPC, s, ok = hexField(s); !ok {
			return out
		}
		if f.fn, s, ok = quoted(s); !ok {
			return out
		}
		if f.off, s, ok = hexField(s); !ok {
			return out
		}
		s = strings.TrimLeft(s, " ")
		if !strings.HasPrefix(s, "}") {
			return out
		}
		s = s[1:]
		out = append(out, f)
	}
}

// hexField cuts a hexadecimal number at the start of s (spaces before it
// skipped).
func hexField(s string) (uint64, string, bool) {
	s = strings.TrimLeft(s, " ")
	end := strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune("0123456789abcdefABCDEF", r) })
	if end < 0 {
		end = len(s)
	}
	v, err := strconv.ParseUint(s[:end], 16, 64)
	return v, s[end:], err == nil
}

// quoted cuts a double-quoted string at the start of s (spaces before it
// skipped).
func quoted(s string) (string, string, bool) {
	s = strings.TrimLeft(s, " ")
	if !strings.HasPrefix(s, `"`) {
		return "", s, false
	}
	end := strings.Index(s[1:], `"`)
	if end < 0 {
		return "", s, false
	}
	return s[1 : end+1], s[end+2:], true
}
