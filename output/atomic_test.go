package output

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// onlyEntries returns the names in dir.
func onlyEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFileAtomic(t *testing.T) {
	t.Setenv("SUDO_UID", "")
	dir := t.TempDir()
	path := filepath.Join(dir, "backtrace_heap.42.txt")
	if err := WriteFileAtomic(path, 0o640, writeString("first\n")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, 0o640, writeString("second\n")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "second\n" {
		t.Errorf("content = %q, want %q", b, "second\n")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o640 {
		t.Errorf("mode = %v, want %v whatever the umask", fi.Mode(), os.FileMode(0o640))
	}
	if names := onlyEntries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want only the file", names)
	}
}

func TestWriteFileAtomicRelative(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := WriteFileAtomic("out.txt", 0o644, writeString("x")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile("out.txt"); err != nil || string(b) != "x" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
}

func TestWriteFileAtomicSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "precious")
	if err := os.WriteFile(target, []byte("do not touch\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "record_allocs.txt")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, 0o644, writeString("records\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "do not touch\n" {
		t.Errorf("symlink target now holds %q (%v)", b, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		t.Errorf("%s has mode %v, want a regular file", path, fi.Mode())
	}
	if b, _ := os.ReadFile(path); string(b) != "records\n" {
		t.Errorf("content = %q", b)
	}
}

func TestWriteFileAtomicSudo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root; run the tests as root (the project's CI does)")
	}
	tests := []struct {
		name             string
		uid, gid         string
		wantUID, wantGID uint32
	}{
		{"both", "12345", "12345", 12345, 12345},
		{"uid only", "12345", "", 12345, 0},
		{"bad gid", "12345", "staff", 12345, 0},
		{"bad uid", "-1", "12345", 0, 0},
		{"reserved uid", "4294967295", "12345", 0, 0},
		{"unset", "", "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SUDO_UID", tt.uid)
			t.Setenv("SUDO_GID", tt.gid)
			path := filepath.Join(t.TempDir(), "dump.txt")
			if err := WriteFileAtomic(path, 0o644, writeString("x")); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != tt.wantUID || st.Gid != tt.wantGID {
				t.Errorf("owner = %d:%d, want %d:%d", st.Uid, st.Gid, tt.wantUID, tt.wantGID)
			}
		})
	}
}

func TestWriteFileAtomicFailures(t *testing.T) {
	t.Setenv("SUDO_UID", "")
	t.Run("write error", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		err := WriteFileAtomic(path, 0o644, func(w io.Writer) error {
			io.WriteString(w, "partial")
			return boom
		})
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
			t.Errorf("error = %v, want %v naming %s", err, boom, path)
		}
		if names := onlyEntries(t, dir); len(names) != 1 || names[0] != "f" {
			t.Errorf("directory holds %v, want only f", names)
		}
		if b, _ := os.ReadFile(path); string(b) != "old" {
			t.Errorf("file changed to %q", b)
		}
	})
	t.Run("panic", func(t *testing.T) {
		dir := t.TempDir()
		func() {
			defer func() { _ = recover() }()
			WriteFileAtomic(filepath.Join(dir, "f"), 0o644, func(io.Writer) error { panic("boom") })
		}()
		if names := onlyEntries(t, dir); len(names) != 0 {
			t.Errorf("directory holds %v after a panic, want nothing", names)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "no", "such", "dir", "f.txt")
		err := WriteFileAtomic(path, 0o644, writeString("x"))
		if err == nil || !strings.Contains(err.Error(), path) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error = %v, want ErrNotExist naming %s", err, path)
		}
	})
	t.Run("directory in the way", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "d")
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := WriteFileAtomic(path, 0o644, writeString("x")); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("error = %v, want one naming %s", err, path)
		}
		if names := onlyEntries(t, dir); len(names) != 1 {
			t.Errorf("directory holds %v, want only d", names)
		}
	})
	t.Run("no file name", func(t *testing.T) {
		dir := t.TempDir() + "/"
		if err := WriteFileAtomic(dir, 0o644, writeString("x")); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("error = %v, want one naming %s", err, dir)
		}
	})
}
