package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// x86-64's DWARF register numbers.
const (
	regRBP = 6
	regRSP = 7
	regRA  = 16
)

// ErrNoCFI is returned for a file without .eh_frame or .debug_frame.
var ErrNoCFI = errors.New("no call frame information (.eh_frame, .debug_frame)")

// FromFile reads the unwind table of the ELF file at path: its .eh_frame,
// else its .debug_frame.
func FromFile(path string) (*Table, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return FromELF(f)
}

// FromELF reads the unwind table of an ELF file from its .eh_frame and
// its .debug_frame: a program built without unwind tables has the frames
// of its own functions in .debug_frame only, and those of the C runtime's
// start files in .eh_frame; a separate debug file has .debug_frame only.
// Where both describe an address, .eh_frame's rule is the one used.
func FromELF(f *elf.File) (*Table, error) {
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("not an x86-64 ELF file")
	}
	var (
		all     []fde
		sources []string
	)
	for _, name := range []string{".eh_frame", ".debug_frame"} {
		s := f.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		fdes, err := parse(data, s.Addr, name == ".debug_frame")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(fdes) > 0 {
			all = append(all, fdes...)
			sources = append(sources, name)
		}
	}
	if len(sources) == 0 {
		return nil, ErrNoCFI
	}
	t := build(all)
	t.Source = strings.Join(sources, " ")
	return t, nil
}

// cie is a common information entry, as its FDEs need it.
type cie struct {
	codeAlign   uint64
	dataAlign   int64
	raReg       uint64
	ptrEnc      byte
	hasAug      bool // augmentation "z": FDEs carry an augmentation length
	signal      bool // augmentation "S"
	initial     []byte
	unsupported string // why FDEs of this CIE cannot be read, "" if they can
}

// fde is a frame description, with the rows its program gives.
type fde struct {
	begin, end uint64
	rows       []Entry
}

// record is a CIE or an FDE of a section: its body from the id on.
type record struct {
	start uint64 // of its length field
	isCIE bool
	// id is an FDE's CIE pointer, made an offset into the section.
	cie  uint64
	body reader // after the id
}

// records splits a section into its records.
func records(data []byte, debugFrame bool) ([]record, error) {
	// Room for records of 48 bytes, about their mean in large files.
	recs := make([]record, 0, len(data)/48+1)
	for off := uint64(0); off < uint64(len(data)); {
		start := off
		r := reader{b: data, off: off}
		length := uint64(r.u32())
		is64 := length == 0xffffffff
		if is64 {
			length = r.u64()
		}
		if r.err != nil {
			return nil, fmt.Errorf("record at %#x: %w", start, r.err)
		}
		if length == 0 {
			if !debugFrame {
				break // .eh_frame's terminator
			}
			off = r.off
			continue
		}
		end := r.off + length
		if end > uint64(len(data)) || end < r.off {
			return nil, fmt.Errorf("record at %#x runs past the section", start)
		}
		off = end
		idPos := r.off
		var id uint64
		if is64 {
			id = r.u64()
		} else {
			id = uint64(r.u32())
		}
		rec := record{start: start, body: reader{b: data[:end], off: r.off}}
		switch {
		case debugFrame:
			rec.isCIE = id == 0xffffffff || (is64 && id == ^uint64(0))
			rec.cie = id
		default:
			rec.isCIE = id == 0
			rec.cie = idPos - id
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// parse reads the FDEs of a .eh_frame (at address addr) or a .debug_frame
// section.
func parse(data []byte, addr uint64, debugFrame bool) ([]fde, error) {
	recs, err := records(data, debugFrame)
	if err != nil {
		return nil, err
	}
	cies := map[uint64]*cie{}
	for _, rec := range recs {
		if !rec.isCIE {
			continue
		}
		c, err := parseCIE(&rec.body, debugFrame)
		if err != nil {
			return nil, fmt.Errorf("CIE at %#x: %w", rec.start, err)
		}
		cies[rec.start] = c
	}
	fdes := make([]fde, 0, len(recs))
	for _, rec := range recs {
		if rec.isCIE {
			continue
		}
		c, ok := cies[rec.cie]
		if !ok {
			return nil, fmt.Errorf("FDE at %#x: no CIE at %#x", rec.start, rec.cie)
		}
		f, err := parseFDE(&rec.body, c, addr)
		if err != nil {
			return nil, fmt.Errorf("FDE at %#x: %w", rec.start, err)
		}
		if f.end > f.begin {
			fdes = append(fdes, f)
		}
	}
	return fdes, nil
}

// build makes a table of FDEs, the first of those that cover an address
// giving its rule.
func build(fdes []fde) *Table {
	slices.SortStableFunc(fdes, func(a, b fde) int {
		switch {
		case a.begin < b.begin:
			return -1
		case a.begin > b.begin:
			return 1
		}
		return 0
	})
	// The entries' room at once: appended a row at a time, a table of
	// half a million (gcc's cc1plus) spent most of its build growing.
	n := 1
	for _, f := range fdes {
		n += len(f.rows) + 1
	}
	t := &Table{Entries: make([]Entry, 0, n)}
	noFDE := Rule{Base: BaseNone, Stop: StopNoFDE}
	var prevEnd uint64
	for i, f := range fdes {
		if f.begin < prevEnd {
			// Covered already (the same function in both sections).
			continue
		}
		if i > 0 && f.begin > prevEnd {
			t.add(prevEnd, noFDE)
		}
		for _, e := range f.rows {
			t.add(e.PC, e.Rule)
		}
		prevEnd = f.end
	}
	if len(fdes) > 0 {
		t.add(prevEnd, noFDE)
	}
	return t
}

func parseCIE(r *reader, debugFrame bool) (*cie, error) {
	c := &cie{}
	version := r.u8()
	aug := r.cstring()
	if debugFrame && version >= 4 {
		r.u8() // address size
		r.u8() // segment selector size
	}
	if aug == "eh" {
		r.u64()
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if debugFrame {
		c.ptrEnc = encAbsptr
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasAug = true
		n := r.uleb()
		augEnd := r.off + n
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.ptrEnc = r.u8()
			case 'P':
				enc := r.u8()
				r.pointer(enc, 0)
			case 'L':
				r.u8()
			case 'S':
				c.signal = true
			default:
				c.unsupported = fmt.Sprintf("augmentation %q", aug)
			}
		}
		r.off = augEnd
	} else if aug != "" && aug != "eh" {
		c.unsupported = fmt.Sprintf("augmentation %q", aug)
	}
	if r.err != nil {
		return nil, r.err
	}
	c.initial = r.b[r.off:]
	if c.raReg != regRA {
		c.unsupported = fmt.Sprintf("return address in register %d", c.raReg)
	}
	return c, nil
}

// Pointer encodings (DW_EH_PE_*).
const (
	encAbsptr  = 0x00
	encUleb    = 0x01
	encUdata2  = 0x02
	encUdata4  = 0x03
	encUdata8  = 0x04
	encSleb    = 0x09
	encSdata2  = 0x0a
	encSdata4  = 0x0b
	encSdata8  = 0x0c
	encPCRel   = 0x10
	encOmit    = 0xff
	encFormat  = 0x0f
	encApplied = 0x70
)

func parseFDE(r *reader, c *cie, secAddr uint64) (fde, error) {
	if c.unsupported != "" {
		return fde{}, nil
	}
	fieldAddr := secAddr + r.off
	begin := r.pointer(c.ptrEnc, fieldAddr)
	// The range has the pointer's format, not its application.
	size := r.pointer(c.ptrEnc&encFormat, 0)
	if c.hasAug {
		n := r.uleb()
		r.off += n
	}
	if r.err != nil {
		return fde{}, r.err
	}
	f := fde{begin: begin, end: begin + size}
	rows, err := run(c, r.b[r.off:], begin, f.end)
	if err != nil {
		return fde{}, err
	}
	f.rows = rows
	return f, nil
}

// reader reads DWARF's encodings, remembering the first error.
type reader struct {
	b   []byte
	off uint64
	err error
}

func (r *reader) need(n uint64) bool {
	if r.err != nil {
		return false
	}
	if r.off+n > uint64(len(r.b)) || r.off+n < r.off {
		r.err = io.ErrUnexpectedEOF
		return false
	}
	return true
}

func (r *reader) u8() byte {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	for {
		b := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *reader) cstring() string {
	start := r.off
	for r.need(1) && r.b[r.off] != 0 {
		r.off++
	}
	s := string(r.b[start:min(r.off, uint64(len(r.b)))])
	r.u8()
	return s
}

// pointer reads a pointer of encoding enc found at address at.
func (r *reader) pointer(enc byte, at uint64) uint64 {
	if enc == encOmit {
		return 0
	}
	var v uint64
	switch enc & encFormat {
	case encAbsptr, encUdata8, encSdata8:
		v = r.u64()
	case encUleb:
		v = r.uleb()
	case encUdata2:
		v = uint64(r.u16())
	case encUdata4:
		v = uint64(r.u32())
	case encSleb:
		v = uint64(r.sleb())
	case encSdata2:
		v = uint64(int64(int16(r.u16())))
	case encSdata4:
		v = uint64(int64(int32(r.u32())))
	default:
		if r.err == nil {
			r.err = fmt.Errorf("pointer encoding %#x", enc)
		}
		return 0
	}
	switch enc & encApplied {
	case 0:
	case encPCRel:
		v += at
	default:
		if r.err == nil {
			r.err = fmt.Errorf("pointer encoding %#x", enc)
		}
	}
	return v
}
