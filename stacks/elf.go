package stacks

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// maxNoteBytes bounds how much of one note segment or section is read while
// looking for the build-id.
const maxNoteBytes = 64 << 10

// ntGNUBuildID is the note type of a GNU build-id (NT_GNU_BUILD_ID).
const ntGNUBuildID = 3

// Segment is one PT_LOAD program header of an ELF file.
type Segment struct {
	VAddr    uint64       // p_vaddr
	Offset   uint64       // p_offset
	FileSize uint64       // p_filesz
	MemSize  uint64       // p_memsz
	Flags    elf.ProgFlag // p_flags (PF_R, PF_W, PF_X)
}

// Symbol is one function symbol of an ELF file.
type Symbol struct {
	Name  string // as in the file: C++ names stay mangled
	Value uint64 // the ELF virtual address of the first instruction
	Size  uint64 // as in the file; 0 when the file does not say
	end   uint64 // the first address past the symbol, as Lookup sees it
}

// ELFFile is one parsed ELF file (an executable or a shared object): its
// build-id, its PT_LOAD segments and its function symbols. An ELFFile does
// not keep the file open. It is safe for concurrent use once built; callers
// must not modify its fields.
type ELFFile struct {
	// Path names the file: the path given to OpenELF or, for a file a
	// Symbolizer opened, the path of the first mapping it was found
	// through ("[vdso]" for the vdso).
	Path string
	// BuildID is the GNU build-id in lower-case hex, "" if the file has
	// none.
	BuildID string
	// Dyn is true for ET_DYN files (shared objects and PIE executables),
	// whose addresses are relative to a load bias, and false for ET_EXEC
	// files, whose addresses are absolute.
	Dyn bool
	// Class and Machine say what the file was built for. Files of another
	// class or machine parse, but their addresses will not match a trace.
	Class   elf.Class
	Machine elf.Machine
	// Loads are the PT_LOAD segments in file order.
	Loads []Segment

	symbols   []Symbol // ascending Value, one per address
	hasSymtab bool     // the file has a .symtab section

	dbg *debugInfo // separate debug information; nil for a file from OpenELF
}

// OpenELF reads the program headers, build-id and function symbols (from
// .symtab and .dynsym) of the executable or shared object at path. It
// returns an error, and never panics, for anything that is not a readable,
// well-formed ELF executable or shared object: a directory, a device, a
// truncated or corrupt file.
func OpenELF(path string) (*ELFFile, error) {
	return openELF(path, true)
}

// openELF is OpenELF, without the symbols unless symbols is true.
func openELF(path string, symbols bool) (*ELFFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("opening ELF file: %w", err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("opening ELF file %s: is a directory", path)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("opening ELF file %s: not a regular file", path)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening ELF file: %w", err)
	}
	defer fh.Close()
	var f *ELFFile
	if symbols {
		f, err = parseELF(fh, path)
	} else {
		_, f, err = parseELFHeaders(fh, path)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing ELF file %s: %w", path, err)
	}
	return f, nil
}

// parseELF reads a whole ELFFile from r.
func parseELF(r io.ReaderAt, path string) (*ELFFile, error) {
	ef, f, err := parseELFHeaders(r, path)
	if err != nil {
		return nil, err
	}
	if err := f.loadSymbols(ef); err != nil {
		return nil, err
	}
	return f, nil
}

// recoverELF turns a panic of debug/elf on malformed input into an error.
func recoverELF(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("malformed ELF file: %v", p)
	}
}

// parseELFHeaders reads the headers, segments and build-id of the ELF file
// in r, the cheap part of parsing. The symbols are read by loadSymbols.
func parseELFHeaders(r io.ReaderAt, path string) (ef *elf.File, f *ELFFile, err error) {
	defer recoverELF(&err)
	ef, err = elf.NewFile(r)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, nil, fmt.Errorf("truncated file: %w", err)
	}
	if err != nil {
		return nil, nil, err
	}
	if ef.Type != elf.ET_EXEC && ef.Type != elf.ET_DYN {
		return nil, nil, fmt.Errorf("ELF type %v is neither an executable nor a shared object", ef.Type)
	}
	f = &ELFFile{
		Path:    path,
		Dyn:     ef.Type == elf.ET_DYN,
		Class:   ef.Class,
		Machine: ef.Machine,
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.Loads = append(f.Loads, Segment{
				VAddr:    p.Vaddr,
				Offset:   p.Off,
				FileSize: p.Filesz,
				MemSize:  p.Memsz,
				Flags:    p.Flags,
			})
		}
	}
	if len(f.Loads) == 0 {
		return nil, nil, errors.New("no PT_LOAD segment")
	}
	f.BuildID = readBuildID(ef)
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_SYMTAB {
			f.hasSymtab = true
			break
		}
	}
	return ef, f, nil
}

// readBuildID returns the GNU build-id of ef in hex, looking first in the
// PT_NOTE segments (which are also present in memory images such as the
// vdso) and then in the SHT_NOTE sections; "" if there is none.
func readBuildID(ef *elf.File) string {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(p.Open(), maxNoteBytes))
		if err != nil {
			continue
		}
		if id := findBuildID(data, ef.ByteOrder, p.Align); id != "" {
			return id
		}
	}
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(s.Open(), maxNoteBytes))
		if err != nil {
			continue
		}
		if id := findBuildID(data, ef.ByteOrder, s.Addralign); id != "" {
			return id
		}
	}
	return ""
}

// findBuildID scans the notes in data for a GNU build-id note. Notes are
// 4-byte aligned, or 8-byte aligned in a segment or section aligned to 8.
func findBuildID(data []byte, order binary.ByteOrder, align uint64) string {
	a := uint64(4)
	if align == 8 {
		a = 8
	}
	up := func(n uint64) uint64 { return (n + a - 1) &^ (a - 1) }
	for uint64(len(data)) >= 12 {
		namesz := uint64(order.Uint32(data[0:]))
		descsz := uint64(order.Uint32(data[4:]))
		typ := order.Uint32(data[8:])
		descOff := up(12 + namesz)
		if descOff > uint64(len(data)) || descsz > uint64(len(data))-descOff {
			return ""
		}
		if typ == ntGNUBuildID && namesz == 4 && string(data[12:16]) == "GNU\x00" && descsz > 0 {
			return hex.EncodeToString(data[descOff : descOff+descsz])
		}
		next := up(descOff + descsz)
		if next > uint64(len(data)) {
			return ""
		}
		data = data[next:]
	}
	return ""
}

// symbolCandidate is a function symbol before duplicates at one address
// are removed.
type symbolCandidate struct {
	Symbol
	dynamic bool        // from .dynsym rather than .symtab
	bind    elf.SymBind // STB_GLOBAL, STB_WEAK, STB_LOCAL
	index   int         // position in the file, for a stable order
}

// loadSymbols reads the function symbols of .symtab and .dynsym into f.
func (f *ELFFile) loadSymbols(ef *elf.File) (err error) {
	defer recoverELF(&err)
	var cands []symbolCandidate
	add := func(syms []elf.Symbol, dynamic bool) {
		for _, s := range syms {
			typ := elf.ST_TYPE(s.Info)
			if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC {
				continue
			}
			if s.Section == elf.SHN_UNDEF {
				continue
			}
			v := s.Value
			if f.Machine == elf.EM_ARM {
				v &^= 1 // the Thumb bit
			}
			if v == 0 {
				continue
			}
			cands = append(cands, symbolCandidate{
				Symbol:  Symbol{Name: unversioned(s.Name), Value: v, Size: s.Size},
				dynamic: dynamic,
				bind:    elf.ST_BIND(s.Info),
				index:   len(cands),
			})
		}
	}
	syms, err := ef.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("reading .symtab: %w", err)
	}
	add(syms, false)
	dyn, err := ef.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("reading .dynsym: %w", err)
	}
	add(dyn, true)
	f.setSymbols(cands)
	return nil
}

// setSymbols keeps the best-named candidate at each address, sorts them and
// works out where each ends.
func (f *ELFFile) setSymbols(cands []symbolCandidate) {
	sort.Slice(cands, func(i, j int) bool { return betterSymbol(&cands[i], &cands[j]) })
	out := make([]Symbol, 0, len(cands))
	for i := range cands {
		if n := len(out); n > 0 && out[n-1].Value == cands[i].Value {
			continue // a worse name for the same address
		}
		out = append(out, cands[i].Symbol)
	}
	for i := range out {
		s := &out[i]
		switch {
		case s.Size > 0:
			s.end = s.Value + s.Size
			if s.end < s.Value {
				s.end = math.MaxUint64
			}
		default:
			// A symbol of unknown size extends to the next symbol, and
			// no further than the end of the segment that holds it.
			s.end = s.Value + 1
			if s.end == 0 {
				s.end = math.MaxUint64
			}
			if i+1 < len(out) {
				s.end = out[i+1].Value
			}
			if seg := f.segmentAt(s.Value); seg != nil {
				segEnd := seg.VAddr + seg.MemSize
				if segEnd < seg.VAddr {
					segEnd = math.MaxUint64
				}
				if i+1 == len(out) || segEnd < s.end {
					s.end = segEnd
				}
			}
		}
	}
	f.symbols = slices.Clip(out)
}

// betterSymbol orders symbols by address and, at one address, puts the
// preferred name first: .symtab before .dynsym, a known size before an
// unknown one, fewer leading underscores (the public name: "memalign" wins
// over "__libc_memalign", which glibc makes global and its alias weak),
// global before weak before local, then file order.
func betterSymbol(a, b *symbolCandidate) bool {
	if a.Value != b.Value {
		return a.Value < b.Value
	}
	if a.dynamic != b.dynamic {
		return !a.dynamic
	}
	if (a.Size > 0) != (b.Size > 0) {
		return a.Size > 0
	}
	if ua, ub := leadingUnderscores(a.Name), leadingUnderscores(b.Name); ua != ub {
		return ua < ub
	}
	if ra, rb := bindRank(a.bind), bindRank(b.bind); ra != rb {
		return ra < rb
	}
	return a.index < b.index
}

// bindRank ranks symbol bindings, lower is preferred.
func bindRank(b elf.SymBind) int {
	switch b {
	case elf.STB_GLOBAL:
		return 0
	case elf.STB_WEAK:
		return 1
	}
	return 2
}

// leadingUnderscores counts the underscores that start name.
func leadingUnderscores(name string) int {
	n := 0
	for n < len(name) && name[n] == '_' {
		n++
	}
	return n
}

// segmentAt returns the PT_LOAD segment whose memory image holds vaddr, or
// nil.
func (f *ELFFile) segmentAt(vaddr uint64) *Segment {
	for i := range f.Loads {
		s := &f.Loads[i]
		if vaddr >= s.VAddr && vaddr-s.VAddr < s.MemSize {
			return s
		}
	}
	return nil
}

// Symbols returns a copy of the file's function symbols in ascending
// address order, one per address.
func (f *ELFFile) Symbols() []Symbol { return slices.Clone(f.symbols) }

// HasSymtab reports whether the file has a .symtab section (it has not been
// stripped of its local symbols).
func (f *ELFFile) HasSymtab() bool { return f.hasSymtab }

// Lookup returns the function symbol that holds the ELF virtual address
// vaddr: the symbol with the greatest start at or below vaddr, if vaddr is
// below its end. A symbol of size 0 ends where the next symbol starts, or
// at the end of its segment.
func (f *ELFFile) Lookup(vaddr uint64) (Symbol, bool) {
	i := sort.Search(len(f.symbols), func(i int) bool { return f.symbols[i].Value > vaddr }) - 1
	if i < 0 || vaddr >= f.symbols[i].end {
		return Symbol{}, false
	}
	return f.symbols[i], true
}

// VAddr converts pc, an address inside mapping m of a process, to the ELF
// virtual address in f that was loaded there. The file offset of pc is
// pc - m.Start + m.Offset; the PT_LOAD segment whose file range holds that
// offset maps it to p_vaddr (preferring an executable segment for an
// executable mapping), and failing that the executable segment with the
// greatest file offset at or below it. ok is false if pc is outside m or no
// segment fits.
func (f *ELFFile) VAddr(m *Mapping, pc uint64) (vaddr uint64, ok bool) {
	if m == nil || pc < m.Start || pc >= m.End {
		return 0, false
	}
	off := pc - m.Start + m.Offset
	if off < m.Offset {
		return 0, false // wrapped around
	}
	wantExec := len(m.Perms) > 2 && m.Perms[2] == 'x'
	best := -1
	for i, s := range f.Loads {
		if off < s.Offset || off-s.Offset >= s.FileSize {
			continue
		}
		if best < 0 || (s.Flags&elf.PF_X != 0) == wantExec && (f.Loads[best].Flags&elf.PF_X != 0) != wantExec {
			best = i
		}
	}
	if best < 0 {
		for i, s := range f.Loads {
			if s.Flags&elf.PF_X != 0 && s.Offset <= off && (best < 0 || s.Offset > f.Loads[best].Offset) {
				best = i
			}
		}
	}
	if best < 0 {
		return 0, false
	}
	s := f.Loads[best]
	return off - s.Offset + s.VAddr, true
}

// Resolver names the function holding an ELF virtual address in one file.
// Resolvers are chained: the first that knows a name wins. A Resolver must
// be safe for concurrent use. Names are returned as they are in their source
// (C++ names mangled); off is vaddr's distance from the function's start.
type Resolver interface {
	Resolve(f *ELFFile, vaddr uint64) (name string, off uint64, ok bool)
}

// SymbolTable is the Resolver that uses the function symbols of the file
// itself (.symtab, then .dynsym).
type SymbolTable struct{}

// Resolve implements Resolver with ELFFile.Lookup.
func (SymbolTable) Resolve(f *ELFFile, vaddr uint64) (string, uint64, bool) {
	if f == nil {
		return "", 0, false
	}
	s, ok := f.Lookup(vaddr)
	if !ok {
		return "", 0, false
	}
	return s.Name, vaddr - s.Value, true
}

// unversioned drops a symbol version ("__libc_start_main@@GLIBC_2.34"),
// which static symbol tables may carry in the name.
func unversioned(name string) string {
	if i := strings.IndexByte(name, '@'); i > 0 {
		return name[:i]
	}
	return name
}
