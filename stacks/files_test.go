package stacks

import (
	"errors"
	"os"
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
