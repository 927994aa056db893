package stacks

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
)

// File is a file of a process: the path the process knows it by, and the
// path at which mdtrace opens the same file. They differ for a process in
// another mount namespace or under another root (a container), whose paths
// mean other files, or none, in mdtrace's; and for a file deleted or
// replaced since the process mapped it, which only the mapping still
// reaches. Every part of mdtrace that reads a process's files (probes,
// symbols, debug files, unwind tables, the allocator's discovery) opens
// Path and names Name.
type File struct {
	// Name is the file's path as the process sees it, without the
	// " (deleted)" that /proc/PID/maps appends.
	Name string
	// Path opens the file from mdtrace: Name itself when the process
	// sees mdtrace's files, /proc/PID/map_files/START-END for a mapped
	// file, /proc/PID/root/... otherwise. The kernel opens it too, for
	// uprobes (it follows the /proc links to the file itself).
	Path string
}

// String returns the file's name, as messages give it.
func (f File) String() string { return f.Name }

// LocalFile is a file of mdtrace's own filesystem, named as it is opened.
func LocalFile(path string) File { return File{Name: path, Path: path} }

// MappedFile returns the file of mapping m of process pid, opened through
// /proc/PID/map_files, which reaches the very file mapped whatever became of
// its path and whatever the process's mount namespace. The path is valid
// while the process maps the file. Reading a map_files link needs
// CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) and ptrace access to the
// process: without, a file that is still at its path is opened there (in
// the process's root), and a deleted one cannot be.
func MappedFile(pid int, m *Mapping) File {
	f := File{Name: m.Name(), Path: fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)}
	_, err := os.Stat(f.Path)
	// A process whose main thread has ended shows no map_files (its
	// threads' directories have none): its file is opened at its path too.
	byPath := errors.Is(err, os.ErrPermission) || err != nil && LiveTask(pid) != ""
	if err == nil || !byPath || m.Deleted() || !strings.HasPrefix(m.Path, "/") {
		return f
	}
	if byPath, err := ResolveFile(pid, f.Name); err == nil {
		return File{Name: f.Name, Path: byPath.Path}
	}
	return f
}

// ProcRoot returns the prefix under which mdtrace opens the paths of
// process pid: "" when the process sees the same files as mdtrace (the
// same mount namespace and root), otherwise /proc/PID/root. An error means
// the process is gone or cannot be inspected.
func ProcRoot(pid int) (string, error) {
	dir := fmt.Sprintf("/proc/%d", pid)
	root := dir + "/root"
	same, err := sameFile(root, "/")
	if err != nil {
		// Its main thread ended: one of its others shows its root.
		if dir = LiveTask(pid); dir == "" {
			return "", err
		}
		root = dir + "/root"
		if same, err = sameFile(root, "/"); err != nil {
			return "", err
		}
	}
	if same {
		ns, err := sameFile(dir+"/ns/mnt", "/proc/self/ns/mnt")
		if err != nil {
			return "", err
		}
		if ns {
			return "", nil
		}
	}
	return root, nil
}

// LiveTask returns, for a process whose main thread has ended while other
// threads of it run on, the /proc directory of one of those threads
// (/proc/PID/task/TID), which shows the process's maps, program, root and
// memory that /proc/PID no longer shows; "" for any other process.
func LiveTask(pid int) string {
	if !zombieState(fmt.Sprintf("/proc/%d/stat", pid)) {
		return ""
	}
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return ""
	}
	for _, t := range tids {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, t.Name())
		if t.Name() != strconv.Itoa(pid) && !zombieState(dir+"/stat") {
			return dir
		}
	}
	return ""
}

// zombieState reports whether the task whose stat file is at path has
// ended (Z, X) or cannot be read.
func zombieState(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	// The state follows the command name, which may hold ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	state := b[i+2]
	return state == 'Z' || state == 'X' || state == 'x'
}

// sameFile reports whether the paths a and b (followed) are one file.
func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// ResolveFile returns the file that name, an absolute path as process pid
// sees it, names: with the process's symbolic links followed inside its
// own root, so that an absolute link in a container (lib64/ld-linux.so.2 ->
// /lib/...) does not lead into mdtrace's files. A path that the process
// maps is better reached with MappedFile, which survives its deletion.
func ResolveFile(pid int, name string) (File, error) {
	if !strings.HasPrefix(name, "/") {
		return File{}, fmt.Errorf("%q is not an absolute path", name)
	}
	root, err := ProcRoot(pid)
	if err != nil {
		return File{}, fmt.Errorf("process %d: %w", pid, err)
	}
	if root == "" {
		return LocalFile(name), nil
	}
	resolved, err := resolveIn(root, name)
	if err != nil {
		return File{}, err
	}
	return File{Name: resolved, Path: root + resolved}, nil
}

// maxLinks bounds the symbolic links followed in one path, as the kernel's
// limit (40) does.
const maxLinks = 40

// errTooManyLinks is resolveIn's error for a loop of links.
var errTooManyLinks = errors.New("too many levels of symbolic links")

// resolveIn follows the symbolic links of name, an absolute path under the
// directory root, the way the kernel would for a process whose root is
// root: an absolute target starts again at root, and ".." never climbs
// above it. It returns the path under root with no link left in it (the
// last component included); a component that does not exist ends the walk
// with an error.
func resolveIn(root, name string) (string, error) {
	links := 0
	done := "/"
	rest := name
	for rest != "" {
		var comp string
		comp, rest, _ = strings.Cut(strings.TrimLeft(rest, "/"), "/")
		switch comp {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, comp)
		fi, err := os.Lstat(root + next)
		if err != nil {
			return "", fmt.Errorf("%s in %s: %w", name, root, err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s in %s: %w", name, root, errTooManyLinks)
		}
		target, err := os.Readlink(root + next)
		if err != nil {
			return "", fmt.Errorf("%s in %s: %w", name, root, err)
		}
		if strings.HasPrefix(target, "/") {
			done = "/"
		}
		rest = target + "/" + rest
	}
	return done, nil
}

// SameFile reports whether a and b are one file (the same device and
// inode), however each is reached. Files that cannot be stat'ed are not.
func SameFile(a, b File) bool {
	if a == b {
		return true
	}
	same, err := sameFile(a.Path, b.Path)
	return err == nil && same
}

// IsLibc reports whether the file at path (a mapping's, or a file's name
// as the loader gives it) is glibc's C library, libc.so.6 or a copy of it
// (a container's): the allocator the shim preloads over, whose chunks and
// arenas mdtrace knows.
func IsLibc(path string) bool {
	return strings.HasPrefix(path[strings.LastIndexByte(path, '/')+1:], "libc.so")
}
