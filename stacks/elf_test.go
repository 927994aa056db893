package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSymbolLookup(t *testing.T) {
	f := &ELFFile{Loads: []Segment{
		{VAddr: 0x1000, Offset: 0x1000, FileSize: 0x1000, MemSize: 0x1000, Flags: elf.PF_R | elf.PF_X},
	}}
	cand := func(name string, value, size uint64, dynamic bool, bind elf.SymBind) symbolCandidate {
		return symbolCandidate{Symbol: Symbol{Name: name, Value: value, Size: size}, dynamic: dynamic, bind: bind}
	}
	cands := []symbolCandidate{
		cand("last_nosize", 0x1800, 0, false, elf.STB_GLOBAL),
		cand("__libc_memalign", 0x1100, 0x20, true, elf.STB_GLOBAL),
		cand("memalign", 0x1100, 0x20, true, elf.STB_WEAK),
		cand("aligned_alloc", 0x1100, 0x20, true, elf.STB_WEAK),
		cand("dyn_name", 0x1200, 0x10, true, elf.STB_GLOBAL),
		cand("symtab_name", 0x1200, 0x10, false, elf.STB_LOCAL),
		cand("unsized_alias", 0x1280, 0, false, elf.STB_GLOBAL),
		cand("sized", 0x1280, 0x8, false, elf.STB_LOCAL),
		cand("nosize", 0x1300, 0, false, elf.STB_GLOBAL),
		cand("after_nosize", 0x1400, 0x10, false, elf.STB_GLOBAL),
		cand("outside", 0x5000, 0, false, elf.STB_GLOBAL),
	}
	for i := range cands {
		cands[i].index = i
	}
	f.setSymbols(cands)

	var names []string
	for _, s := range f.Symbols() {
		names = append(names, s.Name)
	}
	if got, want := strings.Join(names, " "), "memalign symtab_name sized nosize after_nosize last_nosize outside"; got != want {
		t.Errorf("symbols %q, want %q", got, want)
	}
	for _, tc := range []struct {
		vaddr uint64
		name  string // "" for no symbol
		off   uint64
	}{
		{0x10ff, "", 0},
		{0x1100, "memalign", 0},
		{0x111f, "memalign", 0x1f},
		{0x1120, "", 0}, // past the end of a sized symbol
		{0x1205, "symtab_name", 5},
		{0x1287, "sized", 7},
		{0x1288, "", 0},
		{0x1300, "nosize", 0},
		{0x13ff, "nosize", 0xff}, // size 0: up to the next symbol
		{0x1400, "after_nosize", 0},
		{0x1410, "", 0},
		{0x1fff, "last_nosize", 0x7ff}, // size 0, last: up to the end of its segment
		{0x2000, "", 0},
		{0x5000, "outside", 0}, // size 0, in no segment: only its own address
		{0x5001, "", 0},
	} {
		name, off, ok := SymbolTable{}.Resolve(f, tc.vaddr)
		if name != tc.name || off != tc.off || ok != (tc.name != "") {
			t.Errorf("Resolve(%#x) = %q, %#x, %v; want %q, %#x", tc.vaddr, name, off, ok, tc.name, tc.off)
		}
	}
	if _, _, ok := (SymbolTable{}).Resolve(nil, 0x1100); ok {
		t.Error("Resolve(nil) found a name")
	}
}

func TestVAddr(t *testing.T) {
	// The layout of a PIE built by gcc 12 and binutils 2.40.
	pie := &ELFFile{Dyn: true, Loads: []Segment{
		{VAddr: 0, Offset: 0, FileSize: 0x8e0, MemSize: 0x8e0, Flags: elf.PF_R},
		{VAddr: 0x1000, Offset: 0x1000, FileSize: 0x2ed, MemSize: 0x2ed, Flags: elf.PF_R | elf.PF_X},
		{VAddr: 0x2000, Offset: 0x2000, FileSize: 0x188, MemSize: 0x188, Flags: elf.PF_R},
		{VAddr: 0x3db0, Offset: 0x2db0, FileSize: 0x288, MemSize: 0x298, Flags: elf.PF_R | elf.PF_W},
	}}
	// A non-PIE executable of the old two-segment layout.
	exec := &ELFFile{Loads: []Segment{
		{VAddr: 0x400000, Offset: 0, FileSize: 0x7f4, MemSize: 0x7f4, Flags: elf.PF_R | elf.PF_X},
		{VAddr: 0x600e10, Offset: 0xe10, FileSize: 0x230, MemSize: 0x238, Flags: elf.PF_R | elf.PF_W},
	}}
	// Two segments whose file ranges overlap.
	overlap := &ELFFile{Loads: []Segment{
		{VAddr: 0x10000, Offset: 0, FileSize: 0x2000, MemSize: 0x2000, Flags: elf.PF_R},
		{VAddr: 0x20000, Offset: 0x1000, FileSize: 0x1000, MemSize: 0x1000, Flags: elf.PF_R | elf.PF_X},
	}}
	text := Mapping{Start: 0x7f0000001000, End: 0x7f0000002000, Perms: "r-xp", Offset: 0x1000}
	data := Mapping{Start: 0x7f0000003000, End: 0x7f0000004000, Perms: "rw-p", Offset: 0x2000}
	execText := Mapping{Start: 0x400000, End: 0x401000, Perms: "r-xp", Offset: 0}
	execData := Mapping{Start: 0x600000, End: 0x601000, Perms: "rw-p", Offset: 0}
	ovX := Mapping{Start: 0x50000, End: 0x51000, Perms: "r-xp", Offset: 0x1000}
	ovR := Mapping{Start: 0x60000, End: 0x61000, Perms: "r--p", Offset: 0x1000}
	for _, tc := range []struct {
		name  string
		f     *ELFFile
		m     *Mapping
		pc    uint64
		vaddr uint64
		ok    bool
	}{
		{"pie text", pie, &text, 0x7f0000001010, 0x1010, true},
		{"pie text past p_filesz", pie, &text, 0x7f0000001500, 0x1500, true},
		{"pie data", pie, &data, 0x7f0000003db8, 0x3db8, true},
		{"below the mapping", pie, &text, 0x7f0000000fff, 0, false},
		{"at the mapping's end", pie, &text, 0x7f0000002000, 0, false},
		{"nil mapping", pie, nil, 0x7f0000001010, 0, false},
		{"exec text", exec, &execText, 0x400123, 0x400123, true},
		{"exec data", exec, &execData, 0x600e20, 0x600e20, true},
		{"overlap, executable mapping", overlap, &ovX, 0x50010, 0x20010, true},
		{"overlap, read-only mapping", overlap, &ovR, 0x60010, 0x11010, true},
	} {
		v, ok := tc.f.VAddr(tc.m, tc.pc)
		if v != tc.vaddr || ok != tc.ok {
			t.Errorf("%s: VAddr(%#x) = %#x, %v; want %#x, %v", tc.name, tc.pc, v, ok, tc.vaddr, tc.ok)
		}
	}
	// No segment holds the offset and none is executable.
	ro := &ELFFile{Loads: []Segment{{VAddr: 0, Offset: 0, FileSize: 0x100, MemSize: 0x100, Flags: elf.PF_R}}}
	if v, ok := ro.VAddr(&text, 0x7f0000001010); ok {
		t.Errorf("VAddr found %#x in no segment", v)
	}
}

// note builds one ELF note with the given alignment.
func note(align int, name string, typ uint32, desc []byte) []byte {
	pad := func(b []byte) []byte {
		for len(b)%align != 0 {
			b = append(b, 0)
		}
		return b
	}
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(name)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = pad(append(b, name...))
	return pad(append(b, desc...))
}

func TestFindBuildID(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef, 0x01}
	abi := note(4, "GNU\x00", 1, []byte{0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0})
	prop := note(8, "GNU\x00", 5, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	for _, tc := range []struct {
		name  string
		data  []byte
		align uint64
		want  string
	}{
		{"alone", note(4, "GNU\x00", ntGNUBuildID, id), 4, "deadbeef01"},
		{"after the ABI tag", append(abi, note(4, "GNU\x00", ntGNUBuildID, id)...), 4, "deadbeef01"},
		{"8-byte aligned", append(prop, note(8, "GNU\x00", ntGNUBuildID, id)...), 8, "deadbeef01"},
		{"other owner", note(4, "Go\x00\x00", ntGNUBuildID, id), 4, ""},
		{"other type", note(4, "GNU\x00", 4, id), 4, ""},
		{"empty", nil, 4, ""},
		{"truncated", note(4, "GNU\x00", ntGNUBuildID, id)[:18], 4, ""},
		{"huge sizes", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 'G', 'N', 'U', 0}, 4, ""},
	} {
		if got := findBuildID(tc.data, binary.LittleEndian, tc.align); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// elfHeader builds the header and program headers of a little-endian ELF
// file with one PT_LOAD segment and no sections.
func elfHeader(class elf.Class, typ elf.Type, shoff uint64, shnum uint16) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', byte(class), byte(elf.ELFDATA2LSB), 1, 0})
	b.Write(make([]byte, 8))
	if class == elf.ELFCLASS32 {
		binary.Write(&b, le, struct {
			Type, Machine                            uint16
			Version, Entry, Phoff, Shoff, Flags      uint32
			Ehsize, Phentsize, Phnum, Shentsize, Shn uint16
			Shstrndx                                 uint16
		}{uint16(typ), uint16(elf.EM_386), 1, 0x8048000, 52, uint32(shoff), 0, 52, 32, 1, 40, shnum, 0})
		binary.Write(&b, le, elf.Prog32{Type: uint32(elf.PT_LOAD), Off: 0, Vaddr: 0x8048000, Paddr: 0x8048000,
			Filesz: 0x100, Memsz: 0x100, Flags: uint32(elf.PF_R | elf.PF_X), Align: 0x1000})
	} else {
		binary.Write(&b, le, struct {
			Type, Machine                            uint16
			Version                                  uint32
			Entry, Phoff, Shoff                      uint64
			Flags                                    uint32
			Ehsize, Phentsize, Phnum, Shentsize, Shn uint16
			Shstrndx                                 uint16
		}{uint16(typ), uint16(elf.EM_X86_64), 1, 0x401000, 64, shoff, 0, 64, 56, 1, 64, shnum, 0})
		binary.Write(&b, le, elf.Prog64{Type: uint32(elf.PT_LOAD), Off: 0, Vaddr: 0x400000, Paddr: 0x400000,
			Filesz: 0x100, Memsz: 0x100, Flags: uint32(elf.PF_R | elf.PF_X), Align: 0x1000})
	}
	for b.Len() < 0x100 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

func TestOpenELFCrafted(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// A 32-bit executable parses; its addresses just won't match a 64-bit
	// trace.
	f, err := OpenELF(write("elf32", elfHeader(elf.ELFCLASS32, elf.ET_EXEC, 0, 0)))
	if err != nil {
		t.Fatalf("32-bit ELF: %v", err)
	}
	if f.Class != elf.ELFCLASS32 || f.Machine != elf.EM_386 || f.Dyn || len(f.Loads) != 1 ||
		f.Loads[0].VAddr != 0x8048000 || len(f.Symbols()) != 0 || f.BuildID != "" {
		t.Errorf("32-bit ELF: %+v", f)
	}
	f, err = OpenELF(write("elf64", elfHeader(elf.ELFCLASS64, elf.ET_DYN, 0, 0)))
	if err != nil || !f.Dyn || f.Class != elf.ELFCLASS64 {
		t.Errorf("minimal 64-bit ELF: %+v, %v", f, err)
	}

	for _, tc := range []struct {
		name string
		data []byte
		want string // in the error
	}{
		{"core", elfHeader(elf.ELFCLASS64, elf.ET_CORE, 0, 0), "neither an executable nor a shared object"},
		{"many sections", elfHeader(elf.ELFCLASS64, elf.ET_DYN, 0x80, 0xffff), ""},
		{"sections past the end", elfHeader(elf.ELFCLASS64, elf.ET_DYN, 1<<40, 10), ""},
		{"no segments", func() []byte {
			b := elfHeader(elf.ELFCLASS64, elf.ET_DYN, 0, 0)
			binary.LittleEndian.PutUint16(b[56:], 0) // e_phnum
			return b
		}(), "no PT_LOAD segment"},
		{"magic only", []byte("\x7fELF"), ""},
		{"text", []byte("#!/bin/sh\necho hello\n"), ""},
	} {
		p := write(tc.name, tc.data)
		f, err := OpenELF(p)
		if err == nil {
			t.Errorf("%s: OpenELF = %+v, want an error", tc.name, f)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not name the file or say %q", tc.name, err, tc.want)
		}
	}
}

func TestOpenELFObjectFile(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed; this test compiles testdata/fixlib.c")
	}
	obj := filepath.Join(t.TempDir(), "fixlib.o")
	gcc(t, "-c", "-o", obj, filepath.Join("testdata", "fixlib.c"))
	if _, err := OpenELF(obj); err == nil || !strings.Contains(err.Error(), "ET_REL") {
		t.Errorf("OpenELF of an object file: %v", err)
	}
}

func TestOpenELFLibrary(t *testing.T) {
	fx := buildFixtures(t)
	f, err := OpenELF(fx.lib)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Dyn || f.Path != fx.lib || f.BuildID != elfBuildID(t, fx.lib) {
		t.Errorf("got %+v", f)
	}
	want := elfSymbol(t, fx.lib, "fixlib_func")
	s, ok := f.Lookup(want.Value + 3)
	if !ok || s.Name != "fixlib_func" || s.Value != want.Value || s.Size != want.Size {
		t.Errorf("Lookup = %+v, %v; want %+v", s, ok, want)
	}
}
