package stacks

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
)

// systemLibraries returns up to n shared libraries of this machine that
// parse, with their executable segments laid out at distinct addresses as
// a process would map them.
func systemLibraries(tb testing.TB, n int) *Maps {
	tb.Helper()
	paths, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/*.so*")
	var text strings.Builder
	base := uint64(0x7f0000000000)
	count := 0
	seen := map[string]bool{}
	for _, p := range paths {
		if count == n {
			break
		}
		// One name per file: the links of a library name the same file.
		if real, err := filepath.EvalSymlinks(p); err != nil || seen[real] {
			continue
		} else {
			seen[real] = true
			p = real
		}
		f, err := OpenELF(p)
		if err != nil || !f.Dyn || len(f.Symbols()) < 10 {
			continue
		}
		for _, seg := range f.Loads {
			if seg.Flags&1 == 0 { // PF_X
				continue
			}
			start := (base + seg.VAddr) &^ 0xfff
			end := (base + seg.VAddr + seg.MemSize + 0xfff) &^ 0xfff
			fmt.Fprintf(&text, "%x-%x r-xp %08x 00:00 0 %s\n", start, end, seg.Offset&^0xfff, p)
		}
		base += 1 << 32
		count++
	}
	if count < n {
		tb.Skipf("only %d shared libraries with symbols on this machine, want %d", count, n)
	}
	maps, err := ParseMaps([]byte(text.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return maps
}

// dumpStacks makes records backtraces of 16 frames, each frame a pc inside
// a random library of maps.
func dumpStacks(maps *Maps, records int) [][]uint64 {
	rng := rand.New(rand.NewSource(1))
	out := make([][]uint64, records)
	for i := range out {
		st := make([]uint64, 16)
		for j := range st {
			m := maps.Mappings[rng.Intn(len(maps.Mappings))]
			st[j] = m.Start + uint64(rng.Int63n(int64(m.End-m.Start)))
		}
		out[i] = st
	}
	return out
}

// TestSymbolizeHeapDumpParsesEachFileOnce symbolizes the stacks of a
// 100,000-record heap dump over 200 libraries and checks that each file is
// parsed once.
func TestSymbolizeHeapDumpParsesEachFileOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("long: 1.6 million frames")
	}
	maps := systemLibraries(t, 200)
	s := NewSymbolizer()
	named := 0
	for _, st := range dumpStacks(maps, 100000) {
		for _, f := range s.Symbolize(0, maps, st) {
			if f.Func != "" {
				named++
			}
		}
	}
	if parsed, _ := s.Stats(); parsed != 200 {
		t.Errorf("%d files parsed for 200 libraries", parsed)
	}
	t.Logf("%d of 1600000 frames named", named)
}

// BenchmarkSymbolizeHeapDump measures symbolizing every frame of a
// 100,000-record heap dump (16 frames each) over 200 libraries, with a
// fresh symbolizer each time: parsing included.
func BenchmarkSymbolizeHeapDump(b *testing.B) {
	maps := systemLibraries(b, 200)
	stacks := dumpStacks(maps, 100000)
	b.ResetTimer()
	for range b.N {
		s := NewSymbolizer()
		for _, st := range stacks {
			s.Symbolize(0, maps, st)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/dump")
}
