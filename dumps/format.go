package dumps

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
)

// WriteText writes the dump's totals, then its allocations by backtrace
// (at most top of them, all if top is 0), each frame as Android's leak
// report names it, then the functions that hold the most bytes, as the
// allocation's own frame (self) and anywhere in its backtrace (total).
func WriteText(w io.Writer, d *Dump, top int) error {
	bw := bufio.NewWriter(w)
	writeTotals(bw, d)
	bw.WriteString("\nAllocations by backtrace, the most bytes first:\n")
	sites := d.Sites
	if top > 0 && len(sites) > top {
		sites = sites[:top]
	}
	for _, s := range sites {
		fmt.Fprintf(bw, "%d bytes in %d allocations (%.1f%%):\n", s.Bytes, s.Allocs, percent(s.Bytes, d.Bytes))
		if len(s.Frames) == 0 {
			bw.WriteString("          [no backtrace]\n")
			continue
		}
		bw.WriteString(output.BacktraceString(s.Frames))
	}
	if len(sites) < len(d.Sites) {
		var b, n uint64
		for _, s := range d.Sites[len(sites):] {
			b += s.Bytes
			n += s.Allocs
		}
		fmt.Fprintf(bw, "... and %d more backtraces: %d bytes in %d allocations\n", len(d.Sites)-len(sites), b, n)
	}
	bw.WriteString("\nFunctions, the most bytes first: SELF (the allocation's own frame) and TOTAL (anywhere in its backtrace):\n")
	fmt.Fprintf(bw, "%12s %6s %12s %6s  %s\n", "SELF", "", "TOTAL", "", "FUNCTION")
	for _, f := range byFunction(d) {
		fmt.Fprintf(bw, "%12d %5.1f%% %12d %5.1f%%  %s\n", f.self, percent(f.self, d.Bytes), f.total, percent(f.total, d.Bytes), f.name)
	}
	return bw.Flush()
}

// writeTotals writes the lines that open a text report: the dump and its
// totals.
func writeTotals(bw *bufio.Writer, d *Dump) {
	fmt.Fprintf(bw, "%s: Android Native Heap Dump %s, %d records, backtrace_size %d\n", d.Path, d.Version, d.RecordCount, d.BacktraceSize)
	fmt.Fprintf(bw, "Total: %d bytes in %d allocations, %d backtraces", d.Bytes, d.Allocs, len(d.Sites))
	if d.ZygoteAllocs > 0 {
		fmt.Fprintf(bw, " (the zygote's: %d bytes in %d allocations)", d.ZygoteBytes, d.ZygoteAllocs)
	}
	bw.WriteString("\n")
}

func percent(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

type function struct {
	name        string
	self, total uint64
}

// frameName is a frame's function, demangled, or its file and offset.
func frameName(f stacks.Frame) string {
	if f.Func != "" {
		return stacks.Demangle(f.Func)
	}
	if f.MapName != "" {
		return fmt.Sprintf("%s+0x%x", f.MapName, f.RelPC)
	}
	return fmt.Sprintf("0x%x", f.PC)
}

// byFunction adds up the bytes of each function, the most first (at most
// 30 of them).
func byFunction(d *Dump) []function {
	fns := map[string]*function{}
	get := func(name string) *function {
		f := fns[name]
		if f == nil {
			f = &function{name: name}
			fns[name] = f
		}
		return f
	}
	for _, s := range d.Sites {
		seen := map[string]bool{}
		for i, fr := range s.Frames {
			name := frameName(fr)
			if i == 0 {
				get(name).self += s.Bytes
			}
			if !seen[name] {
				seen[name] = true
				get(name).total += s.Bytes
			}
		}
	}
	out := make([]function, 0, len(fns))
	for _, f := range fns {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b function) int {
		if c := cmp.Compare(b.total, a.total); c != 0 {
			return c
		}
		if c := cmp.Compare(b.self, a.self); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return out[:min(len(out), 30)]
}

// WriteFolded writes the dump as folded stacks, the outermost frame first,
// with the live bytes of each backtrace: flamegraph.pl's input.
func WriteFolded(w io.Writer, d *Dump) error {
	bw := bufio.NewWriter(w)
	for _, s := range d.Sites {
		names := make([]string, len(s.Frames))
		for i, fr := range s.Frames {
			names[len(s.Frames)-1-i] = strings.ReplaceAll(frameName(fr), ";", ":")
		}
		if len(names) == 0 {
			names = []string{"[no backtrace]"}
		}
		fmt.Fprintf(bw, "%s %d\n", strings.Join(names, ";"), s.Bytes)
	}
	return bw.Flush()
}

// Profile turns the dump into a pprof profile: sample types inuse_objects
// and inuse_space, a location for each return address with its mapping
// and its function.
func Profile(d *Dump) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"},
	}
	mappings := map[string]*profile.Mapping{}
	mappingOf := func(f stacks.Frame) *profile.Mapping {
		if f.MapName == "" {
			return nil
		}
		if m := mappings[f.MapName]; m != nil {
			return m
		}
		m := &profile.Mapping{ID: uint64(len(p.Mapping) + 1), File: f.MapName, HasFunctions: true}
		if mm := d.Maps.Find(f.PC); mm != nil {
			m.Start, m.Limit, m.Offset = mm.Start, mm.End, mm.Offset
		}
		mappings[f.MapName] = m
		p.Mapping = append(p.Mapping, m)
		return m
	}
	functions := map[string]*profile.Function{}
	locations := map[uint64]*profile.Location{}
	for _, s := range d.Sites {
		sample := &profile.Sample{Value: []int64{int64(s.Allocs), int64(s.Bytes)}}
		for _, fr := range s.Frames {
			loc := locations[fr.PC]
			if loc == nil {
				loc = &profile.Location{ID: uint64(len(p.Location) + 1), Address: fr.PC, Mapping: mappingOf(fr)}
				name := frameName(fr)
				fn := functions[name]
				if fn == nil {
					fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: fr.Func}
					if fr.Func == "" {
						fn.SystemName = name
					}
					functions[name] = fn
					p.Function = append(p.Function, fn)
				}
				loc.Line = []profile.Line{{Function: fn}}
				locations[fr.PC] = loc
				p.Location = append(p.Location, loc)
			}
			sample.Location = append(sample.Location, loc)
		}
		p.Sample = append(p.Sample, sample)
	}
	return p
}

// Growth is a backtrace's change between two dumps.
type Growth struct {
	Frames        []stacks.Frame
	Bytes, Allocs int64
	// OldBytes and NewBytes are what the backtrace held in each dump.
	OldBytes, NewBytes uint64
}

// Diff returns the change of each backtrace from old to cur, the largest
// growth first and the largest shrinking last; backtraces are matched by
// their frames' files and offsets (relative pcs), so that two dumps of one
// program match even if its libraries were loaded elsewhere.
func Diff(old, cur *Dump) []Growth {
	key := func(fs []stacks.Frame) string {
		var b strings.Builder
		for _, f := range fs {
			fmt.Fprintf(&b, "%s+%x;", f.MapName, f.RelPC)
		}
		return b.String()
	}
	byKey := map[string]*Growth{}
	var order []string
	add := func(s Site, sign int64, cur bool) {
		k := key(s.Frames)
		g := byKey[k]
		if g == nil {
			g = &Growth{Frames: s.Frames}
			byKey[k] = g
			order = append(order, k)
		}
		g.Bytes += sign * int64(s.Bytes)
		g.Allocs += sign * int64(s.Allocs)
		if cur {
			g.NewBytes += s.Bytes
			g.Frames = s.Frames
		} else {
			g.OldBytes += s.Bytes
		}
	}
	for _, s := range old.Sites {
		add(s, -1, false)
	}
	for _, s := range cur.Sites {
		add(s, 1, true)
	}
	var out []Growth
	for _, k := range order {
		if g := byKey[k]; g.Bytes != 0 || g.Allocs != 0 {
			out = append(out, *g)
		}
	}
	slices.SortStableFunc(out, func(a, b Growth) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		return cmp.Compare(b.Allocs, a.Allocs)
	})
	return out
}

// WriteDiff writes the growth from old to cur: the totals, then each
// backtrace that changed, signed, the largest growth first.
func WriteDiff(w io.Writer, old, cur *Dump, top int) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s -> %s: %+d bytes, %+d allocations (%d bytes in %d allocations -> %d bytes in %d allocations)\n",
		old.Path, cur.Path, int64(cur.Bytes)-int64(old.Bytes), int64(cur.Allocs)-int64(old.Allocs), old.Bytes, old.Allocs, cur.Bytes, cur.Allocs)
	growth := Diff(old, cur)
	fmt.Fprintf(bw, "%d backtraces changed, the largest growth first:\n", len(growth))
	shown := growth
	if top > 0 && len(shown) > top {
		shown = shown[:top]
	}
	for _, g := range shown {
		fmt.Fprintf(bw, "%+d bytes, %+d allocations (%d -> %d bytes):\n", g.Bytes, g.Allocs, g.OldBytes, g.NewBytes)
		if len(g.Frames) == 0 {
			bw.WriteString("          [no backtrace]\n")
			continue
		}
		bw.WriteString(output.BacktraceString(g.Frames))
	}
	if len(shown) < len(growth) {
		fmt.Fprintf(bw, "... and %d more backtraces that changed\n", len(growth)-len(shown))
	}
	return bw.Flush()
}
