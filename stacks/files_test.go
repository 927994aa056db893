package stacks

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestResolveIn: links are followed inside the root, an absolute target
// starting again at the root and ".." stopping there, as in a container.
func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/lib/x86_64-linux-gnu", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libc.so.6"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"lib":      "usr/lib",          // relative
		"lib64":    "/usr/lib",         // absolute: inside the root, not mdtrace's /usr/lib
		"up":       "../../../usr/lib", // climbs no higher than the root
		"etc/mtab": "/etc/mtab",        // a loop
		"loop":     "loop",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, want string }{
		{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/lib64/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/up/x86_64-linux-gnu/./libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/../../lib64/../lib/x86_64-linux-gnu//libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{"/usr/lib", "/usr/lib"},
	} {
		got, err := resolveIn(root, tc.name)
		if err != nil || got != tc.want {
			t.Errorf("resolveIn(%s) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := resolveIn(root, "/loop/x"); !errors.Is(err, errTooManyLinks) {
		t.Errorf("a loop of links: %v, want %v", err, errTooManyLinks)
	}
	if _, err := resolveIn(root, "/etc/mtab"); !errors.Is(err, errTooManyLinks) {
		t.Errorf("a link to itself: %v, want %v", err, errTooManyLinks)
	}
	if _, err := resolveIn(root, "/lib/missing.so"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want %v", err, os.ErrNotExist)
	}
}

// TestResolveFileSelf: mdtrace's own paths are its own files.
func TestResolveFileSelf(t *testing.T) {
	f, err := ResolveFile(os.Getpid(), "/etc/passwd")
	if err != nil || f != LocalFile("/etc/passwd") {
		t.Errorf("ResolveFile(self, /etc/passwd) = %+v, %v", f, err)
	}
}

func TestIsLibc(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/libc.so.6":          true,
		"/proc/42/root/lib/x86_64-linux-gnu/libc.so.6": true,
		"libc.so.6": true,
		"/usr/lib/x86_64-linux-gnu/libjemalloc.so.2":  false,
		"/usr/lib/x86_64-linux-gnu/libc++.so.1":       false,
		"/opt/libc.so.6/lib/libtcmalloc_minimal.so.4": false,
	} {
		if got := IsLibc(path); got != want {
			t.Errorf("IsLibc(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestOpenMappingFile: where /proc/PID/map_files cannot open a mapping's file
// (here a mapping the process does not have), its path is opened in the
// process's root, a mount namespace in which another file is at that path,
// and only if the file there has the mapping's inode; once the process is
// gone, in mdtrace's root with the same check.
func TestOpenMappingFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a mount namespace needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("unshare (util-linux) is not installed: %v", err)
	}
	dir := t.TempDir()
	// Two programs, told apart by their contents and build-ids.
	outside, inside := filepath.Join(dir, "outside"), filepath.Join(dir, "inside")
	text := map[string]string{}
	for path, from := range map[string]string{outside: "/bin/true", inside: "/bin/false"} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Skipf("no program to copy: %v", err)
		}
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
		text[path] = string(b)
	}
	if text[outside] == text[inside] {
		t.Skip("/bin/true and /bin/false are one program here")
	}
	inode := func(path string) uint64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		_, ino, _ := fileID(fi)
		return ino
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" "$2" && echo ready && exec sleep 60`, "sh", inside, outside)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the namespace's shell said %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	read := func(pid int, m *Mapping) string {
		fh, _ := openMappingFile(pid, m)
		if fh == nil {
			return "nothing"
		}
		defer fh.Close()
		b, err := io.ReadAll(fh)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		what string
		pid  int
		m    Mapping
		want string
	}{
		{"the process's file", pid, Mapping{Start: 0x1000, End: 0x2000, Path: outside, Inode: inode(inside)}, text[inside]},
		{"mdtrace's file, not the process's", pid, Mapping{Start: 0x1000, End: 0x2000, Path: outside, Inode: inode(outside)}, "nothing"},
		{"a deleted file", pid, Mapping{Start: 0x1000, End: 0x2000, Path: outside + " (deleted)", Inode: inode(inside)}, "nothing"},
		{"gone: mdtrace's file", 0, Mapping{Path: outside, Inode: inode(outside)}, text[outside]},
		{"gone: another file now at the path", 0, Mapping{Path: outside, Inode: inode(inside)}, "nothing"},
	} {
		if got := read(tc.pid, &tc.m); got != tc.want {
			t.Errorf("%s: read %d bytes, want %d", tc.what, len(got), len(tc.want))
		}
	}
	// The symbolizer parses the process's program, not mdtrace's.
	want, err := OpenELF(inside)
	if err != nil {
		t.Fatal(err)
	}
	var s Symbolizer
	m := Mapping{Start: 0x1000, End: 0x2000, Path: outside, Inode: inode(inside)}
	e, _ := s.lookupMapping(pid, &m)
	if e.file == nil {
		t.Fatalf("the symbolizer parsed nothing: %v", e.err)
	}
	if e.file.BuildID != want.BuildID {
		t.Errorf("the symbolizer parsed the build-id %s, want %s (the process's program)", e.file.BuildID, want.BuildID)
	}
}
