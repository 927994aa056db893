package stacks

import (
	"debug/elf"
	"os"
	"strings"
	"sync"
	"syscall"
)

// MapsHistory remembers every file mapping a process has had, so that pcs
// in a library unloaded since (dlclose) still resolve. It is safe for
// concurrent use.
type MapsHistory struct {
	mu   sync.Mutex
	seen map[Mapping]bool
	list []Mapping // in the order first seen
	libs map[libraryKey]bool
}

// libraryKey is a library loaded at a load bias.
type libraryKey struct {
	path string
	base uint64
}

// Add remembers the file-backed mappings of a snapshot and returns the
// ones not seen before.
func (h *MapsHistory) Add(m *Maps) []Mapping {
	if m == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[Mapping]bool{}
	}
	var added []Mapping
	for _, mp := range m.Mappings {
		if !strings.HasPrefix(mp.Path, "/") || h.seen[mp] {
			continue
		}
		h.seen[mp] = true
		h.list = append(h.list, mp)
		added = append(added, mp)
	}
	return added
}

func executable(m *Mapping) bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// HasLibrary reports whether the library at path, loaded with load bias
// base, was added already (AddLibrary).
func (h *MapsHistory) HasLibrary(path string, base uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.libs[libraryKey{path, base}]
}

// AddLibrary remembers the executable segments of the ELF file at path,
// loaded with load bias base (the dynamic loader's l_addr), as mappings,
// and returns the ones not seen before. It lets the frames of a library
// resolve even when it was unloaded before its maps could be read. The
// file is read at open, the path as mdtrace reaches it (a process in
// another mount namespace names its files in its own root, ResolveFile);
// "" reads it at path.
func (h *MapsHistory) AddLibrary(path string, base uint64, open string) ([]Mapping, error) {
	// The loader reports its whole list at every change: read each file
	// once per load address.
	key := libraryKey{path, base}
	h.mu.Lock()
	known := h.libs[key]
	if h.libs == nil {
		h.libs = map[libraryKey]bool{}
	}
	h.libs[key] = true
	h.mu.Unlock()
	if known {
		return nil, nil
	}
	if open == "" {
		open = path
	}
	segs, err := executableSegments(open)
	if err != nil {
		return nil, err
	}
	const page = 4096
	var m Maps
	for _, seg := range segs {
		start := (base + seg.VAddr) &^ (page - 1)
		m.Mappings = append(m.Mappings, Mapping{
			Start:  start,
			End:    (base + seg.VAddr + seg.MemSize + page - 1) &^ (page - 1),
			Perms:  "r-xp",
			Offset: seg.Offset &^ (page - 1),
			Path:   path,
		})
	}
	return h.Add(&m), nil
}

// segmentsKey identifies a file's contents as stat gives them.
type segmentsKey struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

// maxSegmentFiles bounds the files whose segments are kept.
const maxSegmentFiles = 4096

// segmentFiles keeps the executable segments of the libraries read by
// AddLibrary: every process of a build loads the same few, each with its
// own load address.
var segmentFiles struct {
	mu    sync.Mutex
	files map[segmentsKey][]Segment
}

// executableSegments returns the loadable executable segments of the ELF
// file at path (only its headers read), parsed once per file.
func executableSegments(path string) ([]Segment, error) {
	var key segmentsKey
	keyed := false
	if st, err := os.Stat(path); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && st.Mode().IsRegular() {
			key = segmentsKey{dev: uint64(sys.Dev), ino: sys.Ino, size: sys.Size, mtime: sys.Mtim.Nano()}
			keyed = true
		}
	}
	if keyed {
		segmentFiles.mu.Lock()
		segs, ok := segmentFiles.files[key]
		segmentFiles.mu.Unlock()
		if ok {
			return segs, nil
		}
	}
	f, err := openELF(path, false)
	if err != nil {
		return nil, err
	}
	var segs []Segment
	for _, seg := range f.Loads {
		if seg.Flags&elf.PF_X != 0 && seg.MemSize != 0 {
			segs = append(segs, seg)
		}
	}
	if keyed {
		segmentFiles.mu.Lock()
		if segmentFiles.files == nil || len(segmentFiles.files) >= maxSegmentFiles {
			segmentFiles.files = map[segmentsKey][]Segment{}
		}
		segmentFiles.files[key] = segs
		segmentFiles.mu.Unlock()
	}
	return segs, nil
}

// Reset forgets every mapping, when the process executes a new program.
func (h *MapsHistory) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen, h.list, h.libs = nil, nil, nil
}

// Find returns the most recently seen mapping that held pc, or nil.
func (h *MapsHistory) Find(pc uint64) *Mapping {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.list) - 1; i >= 0; i-- {
		if m := &h.list[i]; m.Start <= pc && pc < m.End {
			c := *m
			return &c
		}
	}
	return nil
}

// SymbolizeWithHistory is Symbolize, except that a pc that no executable
// mapping of maps holds is resolved against the executable mapping that
// held it before, from hist: the frames of an unloaded library keep their
// names, even when something else (the loader's cache, data) has been
// mapped at its addresses since. A return address always lies in
// executable memory, so a pc in a non-executable mapping is stale.
func (s *Symbolizer) SymbolizeWithHistory(pid int, maps *Maps, hist *MapsHistory, pcs []uint64) []Frame {
	frames := s.Symbolize(pid, maps, pcs)
	if hist == nil {
		return frames
	}
	for i, pc := range pcs {
		if maps != nil {
			if cur := maps.Find(pc); cur != nil && executable(cur) {
				continue
			}
		}
		m := hist.Find(pc)
		if m == nil || !executable(m) {
			continue
		}
		// The library is gone from the process: open its file by path, or
		// use what was parsed while it was mapped.
		frames[i] = s.Symbolize(0, &Maps{Mappings: []Mapping{*m}}, pcs[i:i+1])[0]
	}
	return frames
}
