package output

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// WriteFileAtomic creates or replaces the file at path with what write
// writes, so that readers see either the old file or the complete new one.
//
// The content goes to a new temporary file in the same directory, created
// with O_EXCL (so it never opens an existing file or follows a symlink) and
// given mode perm exactly, whatever the umask. The file is synced, handed to
// the invoking user when mdtrace runs as root under sudo (SUDO_UID, and
// SUDO_GID when it is valid too; invalid values are ignored), and renamed
// over path. A symlink at path is itself replaced, never followed: a root
// process cannot be tricked into overwriting the link's target.
//
// A path that holds something other than a regular file or a symlink (a
// device, a FIFO, a directory) is refused.
//
// Errors name path. On any failure, including a panic in write, the
// temporary file is removed and path is left as it was.
func WriteFileAtomic(path string, perm os.FileMode, write func(io.Writer) error) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("writing %s: %w", path, err)
		}
	}()

	dir, base := filepath.Split(path)
	if base == "" {
		return errors.New("no file name")
	}
	// Replacing a device or a FIFO (renaming over /dev/null, say) would
	// break the system for everyone: refuse.
	if fi, err := os.Lstat(path); err == nil && !fi.Mode().IsRegular() && fi.Mode()&os.ModeSymlink == 0 {
		return fmt.Errorf("not a regular file: %s", fileKind(fi.Mode()))
	}
	if dir == "" {
		dir = "."
	}

	f, err := createTemp(dir, base, perm)
	if err != nil {
		return err
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()

	// The mode given to open is reduced by the umask; set it exactly.
	if err := f.Chmod(perm); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if uid, gid, ok := sudoOwner(); ok {
		if err := f.Chown(uid, gid); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	done = true
	syncDir(dir)
	return nil
}

// createTemp creates a new file ".BASE.tmp-RANDOM" in dir with O_EXCL.
func createTemp(dir, base string, perm os.FileMode) (*os.File, error) {
	var rnd [6]byte
	for range 100 {
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, err
		}
		name := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(rnd[:]))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, errors.New("cannot find an unused temporary file name")
}

// sudoOwner returns the user and group to give files to: those of SUDO_UID
// and SUDO_GID when the process runs as root and SUDO_UID is a valid id.
// The group is -1 (unchanged) when SUDO_GID is missing or invalid.
func sudoOwner() (uid, gid int, ok bool) {
	if os.Geteuid() != 0 {
		return 0, 0, false
	}
	uid, ok = parseID(os.Getenv("SUDO_UID"))
	if !ok {
		return 0, 0, false
	}
	gid, gok := parseID(os.Getenv("SUDO_GID"))
	if !gok {
		gid = -1
	}
	return uid, gid, true
}

// parseID parses a user or group id: a decimal number below 2^32-1, the
// value that chown reserves for "unchanged".
func parseID(s string) (int, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, false
	}
	return int(n), true
}

// syncDir makes the rename durable. It is best effort: the file is already
// complete and in place, and some file systems refuse to sync a directory.
func syncDir(dir string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}

// fileKind names the type of a file that is not a regular file.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}
