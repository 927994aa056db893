package output

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// CreateFile creates or replaces the file at path with a new, empty file
// open for writing, for output written as it comes (the malloc_debug log).
//
// As with WriteFileAtomic, the file is created under a temporary name in
// the same directory with O_EXCL, given mode perm exactly and handed to the
// invoking user under sudo, then renamed over path at once: a symlink at
// path is replaced, never followed. Errors name path.
//
// A character device or a FIFO at path (/dev/null, a terminal, a named pipe)
// is opened for writing instead, never replaced; anything else that is not
// a regular file or a symlink (a block device, a socket, a directory) is
// refused: a log written over a disk would destroy it, and replacing the
// node would break whatever uses it.
func CreateFile(path string, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil {
		switch m := fi.Mode(); {
		case m&os.ModeCharDevice != 0 || m&os.ModeNamedPipe != 0:
			f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return nil, fmt.Errorf("opening %s: %w", path, err)
			}
			return f, nil
		case !m.IsRegular() && m&os.ModeSymlink == 0:
			return nil, fmt.Errorf("creating %s: not a regular file: %s", path, fileKind(m))
		}
	}
	dir, base := filepath.Split(path)
	if base == "" {
		return nil, fmt.Errorf("creating %s: %w", path, errors.New("no file name"))
	}
	if dir == "" {
		dir = "."
	}
	f, err := createTemp(dir, base, perm)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if uid, gid, ok := sudoOwner(); ok {
		if err := f.Chown(uid, gid); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fail(err)
	}
	return f, nil
}
