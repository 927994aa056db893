//go:build linux

package tracer

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mdtrace/mdtrace/unwind"
)

// TestParseUnwindAhead: a table parsed ahead is the file's own, taken
// once; a file changed since it was parsed ahead is not found there.
func TestParseUnwindAhead(t *testing.T) {
	// A C program of the system's: Go's own have no call frame information.
	exe := "/usr/bin/true"
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "copy")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ParseUnwindAhead([]string{exe, copyPath})
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want, err := unwind.FromELF(f)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := statID(exe)
	got, err, ok := takeAhead(id)
	if !ok || err != nil {
		t.Fatalf("parsed ahead: ok %v, err %v", ok, err)
	}
	if !slices.Equal(got.Entries, want.Entries) {
		t.Fatalf("parsed ahead: %d entries, not the file's %d", len(got.Entries), len(want.Entries))
	}
	if _, _, ok := takeAhead(id); ok {
		t.Errorf("a table parsed ahead was taken twice")
	}
	// The copy changes: its id is another file's.
	if err := os.WriteFile(copyPath, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if id, _ := statID(copyPath); func() bool { _, _, ok := takeAhead(id); return ok }() {
		t.Errorf("a file changed since it was parsed ahead took the old table")
	}
	DropUnwindAhead()
}
