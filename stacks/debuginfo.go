package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
)

// DefaultDebugDir is where distributions install separate debug files. It
// is searched after Symbolizer.DebugDirs.
const DefaultDebugDir = "/usr/lib/debug"

// MaxMiniDebugInfo is the largest decompressed .gnu_debugdata section
// (MiniDebugInfo) that is used; a larger one is ignored.
const MaxMiniDebugInfo = 64 << 20

// miniDebugInfoName stands for the .gnu_debugdata section where a file
// name of a debug file is expected.
const miniDebugInfoName = "[.gnu_debugdata]"

// maxDebuglinkBytes bounds the .gnu_debuglink section read.
const maxDebuglinkBytes = 4096

// debugInfo records what a Symbolizer learnt about the separate debug
// information of one ELFFile.
type debugInfo struct {
	dir       string // the directory of the file, "" if its path is not absolute
	root      string // the root its path is in (ProcRoot), "" for mdtrace's
	link      string // the file name in .gnu_debuglink, "" if none
	linkCRC   uint32 // the CRC-32 in .gnu_debuglink
	selfDWARF bool   // the file itself has .debug_info and .debug_line
	// symbolsFrom names where symbols beyond the file's own came from: a
	// debug file's path, miniDebugInfoName, or "" for nowhere.
	symbolsFrom string

	once  sync.Once
	files []*debugFile // the matching separate debug files, best first

	lineMu   sync.Mutex
	lines    *lineTable
	linesErr error // why the line table will never be read
}

// debugFile is one parsed separate debug file.
type debugFile struct {
	path     string
	key      fileKey
	buildID  string
	class    elf.Class
	machine  elf.Machine
	hasDWARF bool
	syms     []symbolCandidate // the function symbols of its .symtab

	crcOnce sync.Once
	crc     uint32
	crcErr  error
}

// debugEntry caches the result of parsing one debug file.
type debugEntry struct {
	once sync.Once
	file *debugFile
	err  error
}

// DebugFile returns where the names of f beyond its own .symtab and
// .dynsym came from: the path of a separate debug file, "[.gnu_debugdata]"
// for MiniDebugInfo, or "" when no other source was used (always "" for a
// file from OpenELF).
func (f *ELFFile) DebugFile() string {
	if f.dbg == nil {
		return ""
	}
	return f.dbg.symbolsFrom
}

// addDebugInfo notes where f's separate debug information may be found and,
// if f has no .symtab, merges the function symbols of the first source that
// has them, in this order: a debug file found by build-id, by
// .gnu_debuglink, in the debuginfod cache, then MiniDebugInfo. Names from
// these sources win over .dynsym names at the same address. ef is f,
// open; root is the root directory f's path is in (ProcRoot), whose debug
// files are looked for first.
func (s *Symbolizer) addDebugInfo(ef *elf.File, f *ELFFile, root string) {
	d := &debugInfo{root: root}
	f.dbg = d
	func() {
		defer func() { _ = recover() }() // a malformed section only loses what it would give
		if filepath.IsAbs(f.Path) {
			d.dir = filepath.Dir(f.Path)
		}
		d.link, d.linkCRC = readDebuglink(ef)
		d.selfDWARF = hasDWARF(ef)
	}()
	if f.hasSymtab {
		return
	}
	for _, df := range s.debugFiles(f) {
		if len(df.syms) > 0 {
			f.mergeSymbols(df.syms)
			d.symbolsFrom = df.path
			return
		}
	}
	if syms, err := miniDebugSymbols(ef, f); err == nil && len(syms) > 0 {
		f.mergeSymbols(syms)
		d.symbolsFrom = miniDebugInfoName
	}
}

// mergeSymbols adds function symbols of a debug file to f, whose own
// symbols all come from .dynsym.
func (f *ELFFile) mergeSymbols(extra []symbolCandidate) {
	cands := make([]symbolCandidate, 0, len(f.symbols)+len(extra))
	for _, sym := range f.symbols {
		cands = append(cands, symbolCandidate{
			Symbol:  Symbol{Name: unversioned(sym.Name), Value: sym.Value, Size: sym.Size},
			dynamic: true,
			bind:    elf.STB_GLOBAL,
			index:   len(cands),
		})
	}
	for _, c := range extra {
		c.index = len(cands)
		cands = append(cands, c)
	}
	f.setSymbols(cands)
}

// funcCandidates returns the defined function symbols of syms, as
// loadSymbols selects them, marked as coming from a .symtab.
func funcCandidates(syms []elf.Symbol, machine elf.Machine) []symbolCandidate {
	var out []symbolCandidate
	for _, s := range syms {
		typ := elf.ST_TYPE(s.Info)
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC || s.Section == elf.SHN_UNDEF {
			continue
		}
		v := s.Value
		if machine == elf.EM_ARM {
			v &^= 1 // the Thumb bit
		}
		if v == 0 {
			continue
		}
		out = append(out, symbolCandidate{
			Symbol: Symbol{Name: unversioned(s.Name), Value: v, Size: s.Size},
			bind:   elf.ST_BIND(s.Info),
			index:  len(out),
		})
	}
	return out
}

// readDebuglink returns the file name and CRC-32 of the .gnu_debuglink
// section of ef, or "" if it has none.
func readDebuglink(ef *elf.File) (string, uint32) {
	sec := ef.Section(".gnu_debuglink")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return "", 0
	}
	data, err := io.ReadAll(io.LimitReader(sec.Open(), maxDebuglinkBytes))
	if err != nil {
		return "", 0
	}
	n := bytes.IndexByte(data, 0)
	if n <= 0 {
		return "", 0
	}
	name := string(data[:n])
	off := (n + 4) &^ 3
	if off+4 > len(data) || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", 0
	}
	return name, ef.ByteOrder.Uint32(data[off:])
}

// hasDWARF reports whether ef has the DWARF sections that line tables need.
func hasDWARF(ef *elf.File) bool {
	has := func(name string) bool {
		for _, n := range []string{".debug_" + name, ".zdebug_" + name} {
			if s := ef.Section(n); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
				return true
			}
		}
		return false
	}
	return has("info") && has("line")
}

// debugFiles returns the separate debug files that match f, best first,
// searching for them on the first call.
func (s *Symbolizer) debugFiles(f *ELFFile) []*debugFile {
	d := f.dbg
	if d == nil {
		return nil
	}
	d.once.Do(func() { d.files = s.findDebugFiles(f) })
	return d.files
}

// findDebugFiles looks for the separate debug files of f: by build-id in
// DIR/.build-id/xx/rest.debug for each of DebugDirs and DefaultDebugDir; by
// .gnu_debuglink in the file's directory, its .debug subdirectory and
// DIR/<the file's directory> for the same DIRs; and by build-id in the
// debuginfod client cache. A candidate is kept if it parses, was built for
// the same class and machine, has the build-id of f (unless one of the two
// has none and the build-id was not the key) and, when found by debuglink,
// has the CRC-32 the link names. The search stops once a file
// with symbols and a file with DWARF line tables have been found. A file
// in another root (a container's) has its debug files looked for in that
// root first, by build-id in DefaultDebugDir and by .gnu_debuglink, with
// the links of the root followed inside it.
func (s *Symbolizer) findDebugFiles(f *ELFFile) []*debugFile {
	d := f.dbg
	dirs := append(append([]string(nil), s.DebugDirs...), DefaultDebugDir)
	type candidate struct {
		path    string
		byID    bool // found by build-id: the build-id must match
		checkCR bool // found by debuglink: the CRC must match
	}
	var cands []candidate
	id := f.BuildID
	validID := len(id) >= 4 && isHexString(id)
	if d.root != "" {
		var inRoot []string
		if validID {
			inRoot = append(inRoot, filepath.Join(DefaultDebugDir, ".build-id", id[:2], id[2:]+".debug"))
		}
		if d.link != "" && d.dir != "" {
			inRoot = append(inRoot, filepath.Join(d.dir, d.link), filepath.Join(d.dir, ".debug", d.link),
				filepath.Join(DefaultDebugDir, d.dir, d.link))
		}
		for i, p := range inRoot {
			if resolved, err := resolveIn(d.root, p); err == nil {
				cands = append(cands, candidate{path: d.root + resolved, byID: validID && i == 0, checkCR: !validID || i > 0})
			}
		}
	}
	if validID {
		for _, dir := range dirs {
			cands = append(cands, candidate{path: filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug"), byID: true})
		}
	}
	if d.link != "" && d.dir != "" {
		cands = append(cands,
			candidate{path: filepath.Join(d.dir, d.link), checkCR: true},
			candidate{path: filepath.Join(d.dir, ".debug", d.link), checkCR: true})
		for _, dir := range dirs {
			cands = append(cands, candidate{path: filepath.Join(dir, d.dir, d.link), checkCR: true})
		}
	}
	if validID {
		for _, dir := range debuginfodCacheDirs() {
			cands = append(cands, candidate{path: filepath.Join(dir, id, "debuginfo"), byID: true})
		}
	}

	var out []*debugFile
	seen := map[string]bool{filepath.Clean(f.Path): true}
	haveSyms, haveDWARF := false, false
	for _, c := range cands {
		p := filepath.Clean(c.path)
		if seen[p] {
			continue
		}
		seen[p] = true
		df, err := s.openDebugFile(p, c.checkCR)
		if err != nil || df.class != f.Class || df.machine != f.Machine {
			continue
		}
		if c.byID && df.buildID != f.BuildID || f.BuildID != "" && df.buildID != "" && df.buildID != f.BuildID {
			continue
		}
		if c.checkCR && (df.crcErr != nil || df.crc != d.linkCRC) {
			continue
		}
		if len(df.syms) == 0 && !df.hasDWARF {
			continue
		}
		out = append(out, df)
		haveSyms = haveSyms || len(df.syms) > 0
		haveDWARF = haveDWARF || df.hasDWARF
		if haveSyms && haveDWARF {
			break
		}
	}
	return out
}

// isHexString reports whether s is made of lower-case hex digits.
func isHexString(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// debuginfodCacheDirs returns the directories of the debuginfod client
// cache: $DEBUGINFOD_CACHE_PATH if set, otherwise
// $XDG_CACHE_HOME/debuginfod_client, ~/.cache/debuginfod_client and, when
// running under sudo, the same in the home directory of SUDO_USER.
func debuginfodCacheDirs() []string {
	if p := os.Getenv("DEBUGINFOD_CACHE_PATH"); p != "" {
		return []string{p}
	}
	var dirs []string
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		dirs = append(dirs, filepath.Join(x, "debuginfod_client"))
	}
	if h := os.Getenv("HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, ".cache", "debuginfod_client"))
	}
	if name := os.Getenv("SUDO_USER"); name != "" {
		if u, err := user.Lookup(name); err == nil && u.HomeDir != "" {
			dirs = append(dirs, filepath.Join(u.HomeDir, ".cache", "debuginfod_client"))
		}
	}
	return dirs
}

// openDebugFile returns the parsed debug file at path, parsing it on the
// first call for this version of the file (same device, inode, size and
// modification time). With wantCRC, the CRC-32 of the whole file is computed
// as well, once.
func (s *Symbolizer) openDebugFile(path string, wantCRC bool) (*debugFile, error) {
	fh, fi := openRegular(path)
	if fh == nil {
		return nil, fmt.Errorf("opening debug file %s: not a readable regular file", path)
	}
	defer fh.Close()
	key := fileKey{size: fi.Size(), mtime: fi.ModTime().UnixNano(), name: path}
	if dev, ino, ok := fileID(fi); ok {
		key.dev, key.ino = dev, ino
	}
	s.mu.Lock()
	if s.debugCache == nil {
		s.debugCache = make(map[fileKey]*debugEntry)
	}
	e := s.debugCache[key]
	if e == nil {
		e = &debugEntry{}
		s.debugCache[key] = e
	}
	s.mu.Unlock()
	e.once.Do(func() {
		e.file, e.err = readDebugFile(fh, path)
		if e.file != nil {
			e.file.key = key
		}
	})
	if e.err != nil {
		return nil, e.err
	}
	df := e.file
	if wantCRC {
		df.crcOnce.Do(func() {
			h := crc32.NewIEEE()
			if _, err := io.Copy(h, io.NewSectionReader(fh, 0, fi.Size())); err != nil {
				df.crcErr = err
				return
			}
			df.crc = h.Sum32()
		})
	}
	return df, nil
}

// readDebugFile parses a separate debug file: its build-id, whether it has
// DWARF line tables, and the function symbols of its .symtab.
func readDebugFile(r io.ReaderAt, path string) (df *debugFile, err error) {
	defer recoverELF(&err)
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("parsing debug file %s: %w", path, err)
	}
	df = &debugFile{
		path:     path,
		buildID:  readBuildID(ef),
		class:    ef.Class,
		machine:  ef.Machine,
		hasDWARF: hasDWARF(ef),
	}
	syms, err := ef.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("reading .symtab of debug file %s: %w", path, err)
	}
	df.syms = funcCandidates(syms, ef.Machine)
	return df, nil
}

// miniDebugSymbols returns the function symbols of the MiniDebugInfo of f:
// the .symtab of the xz-compressed ELF file in its .gnu_debugdata section.
// A section that would decompress to more than MaxMiniDebugInfo bytes is
// ignored.
func miniDebugSymbols(ef *elf.File, f *ELFFile) (cands []symbolCandidate, err error) {
	defer recoverELF(&err)
	sec := ef.Section(".gnu_debugdata")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if sec.Size > MaxMiniDebugInfo {
		return nil, errors.New(".gnu_debugdata is too large")
	}
	data, err := io.ReadAll(io.LimitReader(sec.Open(), MaxMiniDebugInfo))
	if err != nil {
		return nil, fmt.Errorf("reading .gnu_debugdata: %w", err)
	}
	raw, err := unxz(data, MaxMiniDebugInfo)
	if err != nil {
		return nil, fmt.Errorf("decompressing .gnu_debugdata: %w", err)
	}
	mini, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing .gnu_debugdata: %w", err)
	}
	if mini.Class != f.Class || mini.Machine != f.Machine {
		return nil, errors.New(".gnu_debugdata was built for another machine")
	}
	syms, err := mini.Symbols()
	if err != nil {
		return nil, fmt.Errorf("reading the .symtab of .gnu_debugdata: %w", err)
	}
	return funcCandidates(syms, mini.Machine), nil
}
