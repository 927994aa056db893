package stacks

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// maxVDSOBytes bounds how much memory is read for a [vdso] mapping; the
// vdso is a few pages.
const maxVDSOBytes = 1 << 20

// vdsoName is the path /proc/PID/maps gives the vdso.
const vdsoName = "[vdso]"

// Symbolizer turns absolute pcs of a process into Frames. It caches every
// ELF file it parses, keyed by the file's device, inode, size and
// modification time and, when the file has one, by its build-id, so that
// each file is parsed once however many processes and snapshots map it.
// Cached files are never evicted.
//
// A Symbolizer is safe for concurrent use. The zero value is ready to use
// and resolves names with SymbolTable.
type Symbolizer struct {
	// Resolvers name the function holding an address; they are asked in
	// order and the first that knows a name wins. nil means
	// []Resolver{SymbolTable{}}. Set it before the first call to Symbolize
	// and do not change it afterwards.
	Resolvers []Resolver
	// DebugDirs are directories searched for separate debug files of
	// files without a .symtab, before DefaultDebugDir: by build-id as
	// DIR/.build-id/xx/rest.debug and by .gnu_debuglink as
	// DIR/<directory of the file>/<link name>. Set it before the first
	// call to Symbolize and do not change it afterwards.
	DebugDirs []string
	// SymbolRoot, when set, is a directory holding copies of the files a
	// maps snapshot names, under their paths (ROOT/system/lib64/libc.so
	// for /system/lib64/libc.so), as Android's native_heapdump_viewer.py
	// --symbols takes them: a heap dump taken on another machine is
	// symbolized from them, and from the files at their own paths only
	// where ROOT has none. Set it before the first call to Symbolize.
	SymbolRoot string

	mu        sync.Mutex
	byKey     map[fileKey]*fileEntry    // every file opened
	byMapping map[mappingKey]*fileEntry // by the device and inode /proc/PID/maps gives
	byBuildID map[string]*ELFFile       // parsed files that have a build-id
	last      *snapshotMemo             // the files of the last maps snapshot seen
	parsed    atomic.Int64
	hits      atomic.Int64

	debugCache map[fileKey]*debugEntry // separate debug files parsed, guarded by mu
}

// fileKey identifies one version of one file.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtime    int64  // nanoseconds since the Unix epoch
	name     string // the path where the system gives no inode; a digest for memory images
}

// mappingKey is a file's identity as /proc/PID/maps prints it.
type mappingKey struct {
	dev   string
	inode uint64
}

// fileEntry is the cached result of parsing one file. done is closed once
// file and err are set.
type fileEntry struct {
	done chan struct{}
	file *ELFFile
	err  error
}

// noFile stands for a mapping with no file to read.
var noFile = func() *fileEntry {
	e := &fileEntry{done: make(chan struct{})}
	close(e.done)
	return e
}()

// snapshotMemo remembers which file each mapping of one maps snapshot
// resolved to, so that symbolizing many stacks against one snapshot opens
// each file once.
type snapshotMemo struct {
	pid   int
	maps  *Maps
	mu    sync.Mutex
	slots []*fileEntry // by mapping index; nil until looked up
}

// NewSymbolizer returns a Symbolizer with an empty cache that resolves names
// from the files' own symbol tables.
func NewSymbolizer() *Symbolizer {
	return &Symbolizer{Resolvers: []Resolver{SymbolTable{}}}
}

// Stats reports how many ELF files were parsed (including files that turned
// out to be malformed) and how many lookups of a pc's file were served by
// the cache.
func (s *Symbolizer) Stats() (parsed, hits int) {
	return int(s.parsed.Load()), int(s.hits.Load())
}

// Symbolize resolves pcs against a maps snapshot of process pid and returns
// one Frame per pc, in order. For a pc in a file that parses, RelPC is the
// ELF virtual address (see ELFFile.VAddr), which is Android's rel_pc
// (pc - map start + map offset + load bias) and, for a non-PIE executable,
// the absolute address; MapName is the mapping's path without " (deleted)";
// Func and FuncOff come from the first of the Resolvers that knows a name.
//
// While the process exists, files are opened through
// /proc/PID/map_files/START-END, so that deleted or replaced files still
// resolve; this needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) and ptrace
// access to the process. For pid <= 0, a file already cached under the
// device and inode of the mapping is used. Otherwise a file is opened by
// its path unless the mapping says it was deleted; failing that, the file
// cached under the device and inode of the mapping is used. The
// vdso is read from /proc/PID/mem. Pass pid <= 0 once the process has
// exited, since its pid may be reused.
//
// A pc in no mapping, or in a mapping without a usable file (anonymous
// memory, [heap], [stack], a truncated or corrupt ELF), still yields a
// Frame with what is known: RelPC is pc - Start + Offset of its mapping, or
// the pc itself when no mapping holds it, and Func is "". The maps snapshot
// must not be modified afterwards. Symbolize never panics on bad input.
func (s *Symbolizer) Symbolize(pid int, maps *Maps, pcs []uint64) []Frame {
	frames := make([]Frame, len(pcs))
	var memo *snapshotMemo
	var files []*fileEntry // this call's view of memo.slots
	if maps != nil && len(maps.Mappings) > 0 {
		memo = s.memo(pid, maps)
		files = make([]*fileEntry, len(maps.Mappings))
	}
	resolvers := s.Resolvers
	if resolvers == nil {
		resolvers = []Resolver{SymbolTable{}}
	}
	hits := 0
	for i, pc := range pcs {
		fr := Frame{PC: pc, RelPC: pc}
		idx := -1
		if memo != nil {
			idx = maps.index(pc)
		}
		if idx >= 0 {
			m := &maps.Mappings[idx]
			fr.MapName = m.Name()
			fr.RelPC = pc - m.Start + m.Offset
			e := files[idx]
			if e == nil {
				var hit bool
				e, hit = s.fileFor(memo, idx)
				files[idx] = e
				if hit {
					hits++
				}
			} else if e != noFile {
				hits++
			}
			if f := e.file; f != nil {
				if v, ok := f.VAddr(m, pc); ok {
					fr.RelPC = v
					for _, r := range resolvers {
						if name, off, ok := r.Resolve(f, v); ok && name != "" {
							fr.Func, fr.FuncOff = name, off
							break
						}
					}
				}
			}
		}
		frames[i] = fr
	}
	s.hits.Add(int64(hits))
	return frames
}

// memo returns the memo for snapshot maps of process pid, replacing the
// memo of the previous snapshot.
func (s *Symbolizer) memo(pid int, maps *Maps) *snapshotMemo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.last; l != nil && l.pid == pid && l.maps == maps && len(l.slots) == len(maps.Mappings) {
		return l
	}
	s.last = &snapshotMemo{pid: pid, maps: maps, slots: make([]*fileEntry, len(maps.Mappings))}
	return s.last
}

// fileFor returns the cache entry of the file of mapping idx of the memo's
// snapshot (noFile if it has none) and whether it came from the cache.
func (s *Symbolizer) fileFor(memo *snapshotMemo, idx int) (*fileEntry, bool) {
	memo.mu.Lock()
	e := memo.slots[idx]
	memo.mu.Unlock()
	if e != nil {
		return e, e != noFile
	}
	e, hit := s.lookupMapping(memo.pid, &memo.maps.Mappings[idx])
	memo.mu.Lock()
	memo.slots[idx] = e
	memo.mu.Unlock()
	return e, hit
}

// lookupMapping finds the file of mapping m of process pid in the cache or
// parses it. hit reports whether the cache had it.
func (s *Symbolizer) lookupMapping(pid int, m *Mapping) (e *fileEntry, hit bool) {
	if m.Path == vdsoName {
		return s.lookupVDSO(pid, m)
	}
	if m.Path == "" || strings.HasPrefix(m.Path, "[") {
		return noFile, false // anonymous memory, [heap], [stack], [vvar], [anon:NAME]
	}
	var fh *os.File
	var fi os.FileInfo
	if s.SymbolRoot != "" && strings.HasPrefix(m.Path, "/") {
		fh, fi = openRegular(filepath.Join(s.SymbolRoot, m.Name()))
		if fh != nil {
			// The copy, not the mapped file: its own key, no inode check.
			defer fh.Close()
			key := fileKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
			var ok bool
			if key.dev, key.ino, ok = fileID(fi); !ok {
				key.name = m.Name()
			}
			return s.entry(key, func() (*ELFFile, bool, error) { return s.parse(fh, m.Name(), s.SymbolRoot) })
		}
	}
	if e := s.parsedAtPath(m); e != nil {
		return e, true
	}
	mk := mappingKey{m.Dev, m.Inode}
	if pid <= 0 && m.Inode != 0 {
		// The process is gone: the file parsed while it mapped it is
		// the one, whatever its path leads to now in mdtrace's root (a
		// file replaced, or another mount namespace's).
		s.mu.Lock()
		e := s.byMapping[mk]
		s.mu.Unlock()
		if e != nil {
			<-e.done
			return e, true
		}
	}
	fh, fi = openMappingFile(pid, m)
	if fh == nil {
		if m.Inode == 0 {
			return noFile, false
		}
		s.mu.Lock()
		e := s.byMapping[mk]
		s.mu.Unlock()
		if e == nil {
			return noFile, false
		}
		<-e.done
		return e, true
	}
	defer fh.Close()
	key := fileKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	var ok bool
	if key.dev, key.ino, ok = fileID(fi); !ok {
		key.name = m.Name()
	}
	// A process in a container has its debug files in its own root.
	root := ""
	if pid > 0 {
		root, _ = ProcRoot(pid)
	}
	e, hit = s.entry(key, func() (*ELFFile, bool, error) { return s.parse(fh, m.Name(), root) })
	if m.Inode != 0 {
		s.mu.Lock()
		if s.byMapping == nil {
			s.byMapping = make(map[mappingKey]*fileEntry)
		}
		s.byMapping[mk] = e
		s.mu.Unlock()
	}
	return e, hit
}

// parsedAtPath returns the cache entry of mapping m's file, parsed
// already, when the file at m's path is the one mapped: the device and
// inode of the maps line, with the size and modification time of the
// parse. It opens nothing: opening /proc/PID/map_files costs about 20 times
// a stat of the path, for every mapping of every process. nil otherwise.
func (s *Symbolizer) parsedAtPath(m *Mapping) *fileEntry {
	if m.Inode == 0 || !strings.HasPrefix(m.Path, "/") || m.Deleted() {
		return nil
	}
	fi, err := os.Stat(m.Path)
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	dev, ino, ok := fileID(fi)
	if !ok || ino != m.Inode || mapsDev(dev) != m.Dev {
		return nil
	}
	key := fileKey{dev: dev, ino: ino, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	s.mu.Lock()
	e := s.byKey[key]
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	<-e.done
	return e
}

// lookupVDSO reads the vdso image of process pid from its memory and finds
// it in the cache or parses it.
func (s *Symbolizer) lookupVDSO(pid int, m *Mapping) (*fileEntry, bool) {
	if pid <= 0 || m.End-m.Start > maxVDSOBytes || m.Start > math.MaxInt64 {
		return noFile, false
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return noFile, false
	}
	defer mem.Close()
	buf := make([]byte, m.End-m.Start)
	if _, err := mem.ReadAt(buf, int64(m.Start)); err != nil {
		return noFile, false
	}
	sum := sha256.Sum256(buf)
	key := fileKey{name: vdsoName + string(sum[:])}
	return s.entry(key, func() (*ELFFile, bool, error) { return s.parse(bytes.NewReader(buf), vdsoName, "") })
}

// openMappingFile opens the file of mapping m of process pid (0 once the
// process is gone): through /proc/PID/map_files, which reaches the very file
// mapped; else, where that fails (no CAP_SYS_ADMIN, a process whose main
// thread has ended, a process gone), at its path in the process's root, or
// in mdtrace's once the process is gone, and then only if the file there has
// the mapping's inode: a file replaced since it was mapped, or another mount
// namespace's file at the same path, is not read in its place. It returns nil
// when nothing can be opened.
func openMappingFile(pid int, m *Mapping) (*os.File, os.FileInfo) {
	if m.Path == "" || strings.HasPrefix(m.Path, "[") {
		return nil, nil
	}
	if pid > 0 {
		if fh, fi := openRegular(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End)); fh != nil {
			return fh, fi
		}
	}
	if !strings.HasPrefix(m.Path, "/") || m.Deleted() {
		return nil, nil
	}
	path := m.Name()
	if pid > 0 {
		// An error here is a process gone: its path is tried in
		// mdtrace's root, the inode checked.
		if root, err := ProcRoot(pid); err == nil && root != "" {
			resolved, err := resolveIn(root, path)
			if err != nil {
				return nil, nil
			}
			path = root + resolved
		}
	}
	fh, fi := openRegular(path)
	if fh == nil {
		return nil, nil
	}
	if _, ino, ok := fileID(fi); ok && m.Inode != 0 && ino != m.Inode {
		fh.Close()
		return nil, nil
	}
	return fh, fi
}

// openRegular opens path if it names a regular file (devices and FIFOs are
// never opened) and returns it with its FileInfo, or nil.
func openRegular(path string) (*os.File, os.FileInfo) {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return nil, nil
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		fh.Close()
		return nil, nil
	}
	return fh, fi
}

// entry returns the cache entry for key, calling parse to fill it if there
// is none yet. Concurrent callers for one key wait for a single parse. hit
// reports whether the file was already parsed, under this key or under its
// build-id.
func (s *Symbolizer) entry(key fileKey, parse func() (*ELFFile, bool, error)) (e *fileEntry, hit bool) {
	s.mu.Lock()
	if e := s.byKey[key]; e != nil {
		s.mu.Unlock()
		<-e.done
		return e, true
	}
	if s.byKey == nil {
		s.byKey = make(map[fileKey]*fileEntry)
	}
	e = &fileEntry{done: make(chan struct{})}
	s.byKey[key] = e
	s.mu.Unlock()
	func() {
		defer close(e.done) // even if parse panics, waiters are released
		e.file, hit, e.err = parse()
	}()
	return e, hit
}

// parse reads an ELF file from r. If a file with the same build-id, the
// same segments and at least as many symbols was parsed before, it returns
// that one and reused is true.
func (s *Symbolizer) parse(r io.ReaderAt, name, root string) (f *ELFFile, reused bool, err error) {
	ef, f, err := parseELFHeaders(r, name)
	if err != nil {
		s.parsed.Add(1)
		return nil, false, err
	}
	if f.BuildID != "" {
		s.mu.Lock()
		c := s.byBuildID[f.BuildID]
		s.mu.Unlock()
		if c != nil && (c.hasSymtab || !f.hasSymtab) && c.Class == f.Class && c.Machine == f.Machine &&
			c.Dyn == f.Dyn && slices.Equal(c.Loads, f.Loads) {
			return c, true, nil
		}
	}
	s.parsed.Add(1)
	if err := f.loadSymbols(ef); err != nil {
		return nil, false, err
	}
	s.addDebugInfo(ef, f, root)
	if f.BuildID != "" {
		s.mu.Lock()
		if s.byBuildID == nil {
			s.byBuildID = make(map[string]*ELFFile)
		}
		if c := s.byBuildID[f.BuildID]; c == nil || !c.hasSymtab && f.hasSymtab {
			s.byBuildID[f.BuildID] = f
		}
		s.mu.Unlock()
	}
	return f, false, nil
}
