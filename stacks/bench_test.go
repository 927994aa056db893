package stacks

import (
	"strings"
	"testing"
)

// BenchmarkSymbolize symbolizes 10,000 pcs spread over the executable
// mappings of a running fixture (the program, its library, libc, the
// dynamic linker and the vdso) with a warm cache.
func BenchmarkSymbolize(b *testing.B) {
	fx := buildFixtures(b)
	pid, _ := startFixture(b, fx.pie)
	maps, err := ReadMaps(pid)
	if err != nil {
		b.Fatal(err)
	}
	var text []Mapping
	for _, m := range maps.Mappings {
		if m.Perms[2] == 'x' && (strings.HasPrefix(m.Path, "/") || m.Path == "[vdso]") {
			text = append(text, m)
		}
	}
	const n = 10000
	pcs := make([]uint64, n)
	x := uint64(88172645463325252)
	for i := range pcs {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		m := text[i%len(text)]
		pcs[i] = m.Start + x%(m.End-m.Start)
	}
	s := NewSymbolizer()
	s.Symbolize(pid, maps, pcs)

	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		iters := 0
		for b.Loop() {
			s.Symbolize(pid, maps, pcs)
			iters++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(iters*n), "ns/pc")
	})
	b.Run("new-snapshot", func(b *testing.B) {
		// Every call brings a new snapshot, so each file is opened again
		// and found in the cache by its identity.
		b.ReportAllocs()
		iters := 0
		for b.Loop() {
			s.Symbolize(pid, &Maps{Mappings: maps.Mappings, Raw: maps.Raw}, pcs)
			iters++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(iters*n), "ns/pc")
	})
	if parsed, _ := s.Stats(); parsed != len(uniquePaths(text)) {
		b.Errorf("parsed %d files for %d distinct executable mappings", parsed, len(uniquePaths(text)))
	}
}

// uniquePaths returns the distinct paths of mappings.
func uniquePaths(mappings []Mapping) map[string]bool {
	seen := map[string]bool{}
	for _, m := range mappings {
		seen[m.Path] = true
	}
	return seen
}
