package output

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCreateFileReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep\n"), 0o644)
	path := filepath.Join(dir, "log")
	os.Symlink(victim, path)
	f, err := CreateFile(path, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("line\n")
	f.Close()
	if b, _ := os.ReadFile(victim); string(b) != "keep\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
		t.Fatalf("%s: %v %v", path, fi.Mode(), err)
	}
	if b, _ := os.ReadFile(path); string(b) != "line\n" {
		t.Errorf("content %q", b)
	}
}

func TestCreateFileOpensDevicesAndFIFOs(t *testing.T) {
	f, err := CreateFile("/dev/null", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, err := os.Lstat("/dev/null")
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("/dev/null is no longer a device: %v %v", fi.Mode(), err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := CreateFile(fifo, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("x")
	w.Close()
	if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced")
	}
}

func TestCreateFileErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := CreateFile(filepath.Join(dir, "no", "such"), 0o644)
	if err == nil || !strings.HasPrefix(err.Error(), "creating "+filepath.Join(dir, "no", "such")+": ") {
		t.Errorf("missing directory: %v", err)
	}
	if _, err := CreateFile(dir+"/", 0o644); err == nil {
		t.Error("a path without a file name was accepted")
	}
}

func TestWriteFileAtomicRefusesDevices(t *testing.T) {
	err := WriteFileAtomic("/dev/null", 0o644, func(w io.Writer) error { return nil })
	if err == nil || err.Error() != "writing /dev/null: not a regular file: a character device" {
		t.Errorf("WriteFileAtomic(/dev/null) = %v", err)
	}
	if fi, _ := os.Lstat("/dev/null"); fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatal("/dev/null was replaced")
	}
}

// TestCreateFileRefusesOtherNodes: a block device, a socket or a directory
// at the path is neither written nor replaced.
func TestCreateFileRefusesOtherNodes(t *testing.T) {
	dir := t.TempDir()
	blk := filepath.Join(dir, "blk")
	if err := syscall.Mknod(blk, syscall.S_IFBLK|0o600, 7<<8); err != nil {
		t.Skipf("cannot make a block device node (needs root): %v", err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)
	for path, kind := range map[string]string{blk: "a block device", sock: "a socket", sub: "a directory"} {
		before, _ := os.Lstat(path)
		f, err := CreateFile(path, 0o600)
		if err == nil {
			f.Close()
		}
		if want := "creating " + path + ": not a regular file: " + kind; err == nil || err.Error() != want {
			t.Errorf("CreateFile(%s) = %v, want %q", path, err, want)
		}
		if after, err := os.Lstat(path); err != nil || after.Mode() != before.Mode() {
			t.Errorf("%s was replaced: %v %v", path, after.Mode(), err)
		}
	}
}
