package stacks

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// MaxDWARFBytes bounds the size of the DWARF sections a line table is read
// from; a file with more is given no line numbers.
const MaxDWARFBytes = 512 << 20

// MaxLineRows bounds the rows kept from the line table of one file; rows
// past it are dropped, and their addresses get no line numbers.
const MaxLineRows = 1 << 23

// endOfSequence marks a lineRow that ends a sequence of addresses.
const endOfSequence = math.MaxUint32

// dwarfLineSections are the sections debug/dwarf reads to decode line
// tables, without the "debug_" prefix.
var dwarfLineSections = []string{"abbrev", "info", "line", "line_str", "str", "str_offsets", "addr", "ranges", "rnglists", "types"}

// lineRow is one row of a line table: from addr up to the next row, the
// code comes from line of files[file].
type lineRow struct {
	addr uint64
	file uint32 // endOfSequence for a row that ends a sequence
	line int32
}

// lineTable is the line table of one ELF file, sorted by address.
type lineTable struct {
	rows  []lineRow
	files []string
}

// find returns the file and line of the instruction at vaddr.
func (t *lineTable) find(vaddr uint64) (string, int, bool) {
	i := sort.Search(len(t.rows), func(i int) bool { return t.rows[i].addr > vaddr }) - 1
	if i < 0 || t.rows[i].file == endOfSequence || t.rows[i].line <= 0 {
		return "", 0, false
	}
	return t.files[t.rows[i].file], int(t.rows[i].line), true
}

// Line returns the source file and line of the instruction at pc in process
// pid, whose maps snapshot is maps, from the DWARF line table of the file
// mapped there or, if that file has none, of its separate debug file (found
// as for symbols; see Symbolizer.DebugDirs). For a return address, pass the
// address of the call instruction (for example pc-1) to get the line of the
// call. Files are opened as by Symbolize. Each file's line table is read
// once and kept; tables larger than MaxDWARFBytes of DWARF or MaxLineRows
// rows are not (wholly) read. ok is false when no line is known. Line is
// safe for concurrent use and never panics on bad input.
func (s *Symbolizer) Line(pid int, maps *Maps, pc uint64) (file string, line int, ok bool) {
	if maps == nil || len(maps.Mappings) == 0 {
		return "", 0, false
	}
	idx := maps.index(pc)
	if idx < 0 {
		return "", 0, false
	}
	e, _ := s.fileFor(s.memo(pid, maps), idx)
	f := e.file
	if f == nil || f.dbg == nil {
		return "", 0, false
	}
	m := &maps.Mappings[idx]
	v, ok := f.VAddr(m, pc)
	if !ok {
		return "", 0, false
	}
	t := s.lineTable(pid, m, f)
	if t == nil {
		return "", 0, false
	}
	return t.find(v)
}

// lineTable returns the line table of f, which mapping m of process pid
// maps, reading it on first use. It returns nil if there is none. A file
// that cannot be opened now (a deleted file once its process is gone) is
// tried again on the next call.
func (s *Symbolizer) lineTable(pid int, m *Mapping, f *ELFFile) *lineTable {
	d := f.dbg
	d.lineMu.Lock()
	defer d.lineMu.Unlock()
	if d.lines != nil || d.linesErr != nil {
		return d.lines
	}
	var fh *os.File
	if d.selfDWARF {
		fh, _ = openMappingFile(pid, m)
	} else {
		found := false
		for _, df := range s.debugFiles(f) {
			if !df.hasDWARF {
				continue
			}
			found = true
			var fi os.FileInfo
			if fh, fi = openRegular(df.path); fh != nil {
				dev, ino, _ := fileID(fi)
				if dev != df.key.dev || ino != df.key.ino || fi.Size() != df.key.size || fi.ModTime().UnixNano() != df.key.mtime {
					fh.Close() // replaced since it was checked
					fh = nil
					continue
				}
				break
			}
		}
		if !found {
			d.linesErr = errors.New("no DWARF line table")
			return nil
		}
	}
	if fh == nil {
		return nil
	}
	defer fh.Close()
	d.lines, d.linesErr = readLineTable(fh)
	return d.lines
}

// readLineTable reads the DWARF line tables of every compilation unit of
// the ELF file in r into one table. Sequences that start at address 0 (code
// the linker discarded) are dropped.
func readLineTable(r io.ReaderAt) (t *lineTable, err error) {
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, fmt.Errorf("malformed DWARF: %v", p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	var total uint64
	for _, name := range dwarfLineSections {
		for _, prefix := range []string{".debug_", ".zdebug_"} {
			if sec := ef.Section(prefix + name); sec != nil && sec.Type != elf.SHT_NOBITS {
				total += sec.Size
			}
		}
	}
	if total > MaxDWARFBytes {
		return nil, fmt.Errorf("%d bytes of DWARF is more than %d", total, MaxDWARFBytes)
	}
	data, err := ef.DWARF()
	if err != nil {
		return nil, fmt.Errorf("reading DWARF: %w", err)
	}
	t = &lineTable{}
	fileIndex := map[string]uint32{}
	var seq []lineRow
	rd := data.Reader()
	for len(t.rows) < MaxLineRows {
		ent, err := rd.Next()
		if err != nil || ent == nil {
			break
		}
		if ent.Tag != dwarf.TagCompileUnit && ent.Tag != dwarf.TagPartialUnit {
			rd.SkipChildren()
			continue
		}
		lr, err := data.LineReader(ent)
		rd.SkipChildren()
		if err != nil || lr == nil {
			continue
		}
		seq = seq[:0]
		var le dwarf.LineEntry
		for len(t.rows)+len(seq) < MaxLineRows {
			if err := lr.Next(&le); err != nil {
				break // io.EOF at the end of the unit; a malformed unit loses its rest
			}
			row := lineRow{addr: le.Address, file: endOfSequence}
			if !le.EndSequence {
				name := ""
				if le.File != nil {
					name = le.File.Name
				}
				idx, ok := fileIndex[name]
				if !ok {
					idx = uint32(len(t.files))
					fileIndex[name] = idx
					t.files = append(t.files, name)
				}
				row.file, row.line = idx, int32(min(le.Line, math.MaxInt32))
			}
			seq = append(seq, row)
			if le.EndSequence {
				if seq[0].addr != 0 && seq[0].addr <= le.Address {
					t.rows = append(t.rows, seq...)
				}
				seq = seq[:0]
			}
		}
	}
	// Rows of one sequence keep their order; where a sequence ends at the
	// address another starts, the end comes first.
	sort.SliceStable(t.rows, func(i, j int) bool {
		a, b := t.rows[i], t.rows[j]
		if a.addr != b.addr {
			return a.addr < b.addr
		}
		return a.file == endOfSequence && b.file != endOfSequence
	})
	return t, nil
}
