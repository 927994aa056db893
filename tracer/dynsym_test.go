//go:build linux

package tracer

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLookupDynamic finds every dynamic symbol of real files through their
// GNU hash tables, as reading them all finds it, and finds no name they
// lack.
func TestLookupDynamic(t *testing.T) {
	files := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/python3", "/usr/bin/sqlite3"}
	if cc1, _ := filepath.Glob("/usr/lib/gcc/x86_64-linux-gnu/*/cc1plus"); len(cc1) > 0 {
		files = append(files, cc1[len(cc1)-1])
	}
	for _, path := range files {
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		ef, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		all, err := ef.DynamicSymbols()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want := map[string][]elf.Symbol{}
		for _, s := range all {
			if s.Section == elf.SHN_UNDEF {
				// Undefined symbols are not in the hash table.
				continue
			}
			name, _, _ := strings.Cut(s.Name, "@")
			want[name] = append(want[name], elf.Symbol{Name: name, Info: s.Info, Other: s.Other, Section: s.Section, Value: s.Value, Size: s.Size})
		}
		for name, ws := range want {
			got, err := lookupDynamic(ef, name)
			if err != nil {
				t.Fatalf("%s: %s: %v", path, name, err)
			}
			if !slices.Equal(got, ws) {
				t.Fatalf("%s: %s: found %v, want %v", path, name, got, ws)
			}
		}
		for _, name := range []string{"", "mdtrace_no_such_symbol", "mallocx", "mallo"} {
			if got, err := lookupDynamic(ef, name); err != nil || len(got) != 0 {
				t.Errorf("%s: %q: found %v (%v), want none", path, name, got, err)
			}
		}
		t.Logf("%s: %d names", path, len(want))
		ef.Close()
	}
}
