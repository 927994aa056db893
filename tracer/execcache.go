//go:build linux

package tracer

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// fileID tells a file apart from another, or from itself changed.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
	ctime    unix.Timespec
}

func statID(path string) (fileID, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, true
}

// ldCache is the dynamic loader's cache of library paths.
const ldCache = "/etc/ld.so.cache"

// execKeyT is what decides the loader's list of libraries for a program:
// the executable, the loader variables of its environment (LD_*,
// GLIBC_TUNABLES), the loader cache, and the working directory when a path
// in LD_LIBRARY_PATH, LD_PRELOAD or LD_AUDIT is relative.
type execKeyT struct {
	exe     fileID
	env     string
	cache   fileID
	cwd     string
	exePath string
}

// execKey returns the key of process pid's program, ok false when a file
// it depends on cannot be read (the answer is then not remembered).
func execKey(pid int, exe string, environ []byte) (k execKeyT, ok bool) {
	if k.exe, ok = exeID(pid); !ok {
		return k, false
	}
	k.exePath = exe
	k.cache, _ = statID(ldCache)
	var vars []string
	relative := false
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if !bytes.HasPrefix(kv, []byte("LD_")) && !bytes.HasPrefix(kv, []byte("GLIBC_TUNABLES=")) {
			continue
		}
		vars = append(vars, string(kv))
		name, v, _ := strings.Cut(string(kv), "=")
		if name != "LD_LIBRARY_PATH" && name != "LD_PRELOAD" && name != "LD_AUDIT" {
			continue
		}
		for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' || r == ';' }) {
			if !strings.HasPrefix(p, "/") {
				relative = true
			}
		}
	}
	k.env = strings.Join(vars, "\x00")
	if relative {
		k.cwd = procCwd(pid)
	}
	return k, true
}

// procCwd returns the working directory of process pid, "" if unknown.
func procCwd(pid int) string {
	cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return cwd
}

// execEntry is a remembered answer, with the files it was drawn from.
type execEntry struct {
	lib, runtime string
	files        []string
	ids          []fileID
}

// maxExecCache bounds the answers remembered.
const maxExecCache = 1024

// execCache remembers AllocatorOfExec's answers.
var execCache = &execMemo{m: newMemo[execKeyT, execEntry](maxExecCache)}

type execMemo struct {
	m *memo[execKeyT, execEntry]
}

// get returns the remembered allocator and C++ runtime for k, if none of
// the files they were found from has changed since.
func (c *execMemo) get(k execKeyT) (lib, runtime string, ok bool) {
	e, ok := c.m.get(k)
	if !ok {
		return "", "", false
	}
	for i, f := range e.files {
		if id, ok := statID(f); !ok || id != e.ids[i] {
			c.m.drop(k)
			return "", "", false
		}
	}
	return e.lib, e.runtime, true
}

// files returns the loader and the libraries remembered for k, nil if
// none.
func (c *execMemo) files(k execKeyT) []string {
	e, ok := c.m.get(k)
	if !ok {
		return nil
	}
	return e.files
}

// put remembers that k's program, with loader interp and libraries libs,
// gets malloc from lib and C++'s runtime from runtime.
func (c *execMemo) put(k execKeyT, interp string, libs []string, lib, runtime string) {
	e := execEntry{lib: lib, runtime: runtime}
	for _, f := range append([]string{interp}, libs...) {
		if f == "" {
			continue
		}
		id, ok := statID(f)
		if !ok {
			return
		}
		e.files = append(e.files, f)
		e.ids = append(e.ids, id)
	}
	c.m.put(k, e)
}

// fromFile returns what c keeps for the file at path as it is (its
// device, inode, size and times, under key(identity)), and the identity;
// where c keeps nothing, read makes it, and c keeps it if the file was the
// same before and after the read. A file that cannot be stat'ed is read,
// nothing is kept, and the identity is zero.
func fromFile[K comparable, V any](c *memo[K, V], path string, key func(fileID) K, read func() (V, error)) (V, fileID, error) {
	id, ok := statID(path)
	if ok {
		if v, ok := c.get(key(id)); ok {
			return v, id, nil
		}
	}
	v, err := read()
	if err != nil {
		return v, id, err
	}
	if after, same := statID(path); ok && same && after == id {
		c.put(key(id), v)
	}
	return v, id, nil
}

// byID keys a memo by the file's identity alone.
func byID(id fileID) fileID { return id }

// funcCache remembers funcOffsets' answers by file: 256 files.
var funcCache = newMemo[fileID, map[string]funcSym](256)

// memo is a map for concurrent use that holds at most max entries: full,
// it is emptied before the next is added.
type memo[K comparable, V any] struct {
	mu  sync.Mutex
	max int
	m   map[K]V
}

func newMemo[K comparable, V any](max int) *memo[K, V] {
	return &memo[K, V]{max: max, m: map[K]V{}}
}

func (c *memo[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *memo[K, V]) put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = v
}

func (c *memo[K, V]) drop(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}

// len returns the number of entries.
func (c *memo[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
