package output

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update rewrites the golden files with the current output. The committed
// golden files were written by hand from the specification; -update is for
// confirming a deliberate format change, after review of the diff.
var update = flag.Bool("update", false, "rewrite the golden files in ../testdata/golden")

// goldenDir holds the golden outputs of the project.
const goldenDir = "../testdata/golden"

// checkGolden compares got with the golden file name, or rewrites the file
// under -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

// testMaps is the maps text of the heap dump golden files.
const testMaps = `5581a4c00000-5581a4c01000 r--p 00000000 fd:01 1048602                    /usr/local/bin/malloc_testing
5581a4c01000-5581a4c02000 r-xp 00001000 fd:01 1048602                    /usr/local/bin/malloc_testing
5581a5e3d000-5581a5e5e000 rw-p 00000000 00:00 0                          [heap]
7f3c2e400000-7f3c2e428000 r--p 00000000 fd:01 1835231                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f3c2e428000-7f3c2e5bd000 r-xp 00028000 fd:01 1835231                    /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd6b9d1000-7ffd6b9f2000 rw-p 00000000 00:00 0                          [stack]
`
