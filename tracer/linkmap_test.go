//go:build linux

package tracer

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mdtrace/mdtrace/stacks"
)

// TestLinkedFilesOrder: the loader's list of a program linked with
// jemalloc, read from its memory, is in load order (jemalloc, needed
// first, before libc, which the kernel may have mapped below it), each
// file opened where the process maps it; AllocatorOfRunning picks
// jemalloc.
func TestLinkedFilesOrder(t *testing.T) {
	const jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
	if _, err := os.Stat(jemalloc); err != nil {
		t.Skipf("libjemalloc2 is not installed (make deps installs it): %v", err)
	}
	cmd := exec.Command(testProg(t, "otheralloc_jemalloc"))
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	loader, err := LoaderOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	files, err := linkedFiles(pid, loader, maps)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f.Name))
		if id, ok := statID(f.Path); !ok {
			t.Errorf("%s: cannot open %s", f.Name, f.Path)
		} else if nid, ok := statID(f.Name); !ok || nid != id {
			t.Errorf("%s opens another file than %s", f.Path, f.Name)
		}
	}
	if len(names) < 2 || names[0] != "libjemalloc.so.2" || names[1] != "libc.so.6" {
		t.Errorf("the loader's list %q, want libjemalloc.so.2 then libc.so.6 first", names)
	}
	lib, err := AllocatorOfRunning(pid)
	if want := canonical(jemalloc); err != nil || lib.Name != want {
		t.Errorf("AllocatorOfRunning = %+v, %v; want %s", lib, err, want)
	}
}
