package stacks

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// selfVDSO returns the vdso image of the test process, a small real ELF
// file, or nil if it cannot be read.
func selfVDSO() []byte {
	maps, err := ReadMaps(os.Getpid())
	if err != nil {
		return nil
	}
	for _, m := range maps.Mappings {
		if m.Path != "[vdso]" || m.End-m.Start > maxVDSOBytes {
			continue
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil
		}
		defer mem.Close()
		buf := make([]byte, m.End-m.Start)
		if _, err := mem.ReadAt(buf, int64(m.Start)); err != nil {
			return nil
		}
		return buf
	}
	return nil
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte(trickyMaps))
	for _, line := range strings.Split(trickyMaps, "\n") {
		f.Add([]byte(line))
	}
	f.Add([]byte(""))
	f.Add([]byte("10-20 r-xp 0 00:00 0\n\n15-30 r-xp 0 00:00 0\n"))
	f.Add([]byte("00400000-00401000 r-xp 00000000 fe:00 42 /a b (deleted)\r\n"))
	if self, err := os.ReadFile("/proc/self/maps"); err == nil {
		f.Add(self)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMaps(data)
		if err != nil {
			if m != nil {
				t.Fatalf("ParseMaps returned both %+v and %v", m, err)
			}
			if !strings.HasPrefix(err.Error(), "maps line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		if !bytes.Equal(m.Raw, data) {
			t.Fatal("Raw differs from the input")
		}
		for i := range m.Mappings {
			mp := &m.Mappings[i]
			if mp.Start >= mp.End || i > 0 && mp.Start < m.Mappings[i-1].End {
				t.Fatalf("mapping %d out of order: %+v", i, *mp)
			}
			if !validPerms(mp.Perms) || strings.ContainsRune(mp.Path, '\n') {
				t.Fatalf("mapping %d: %+v", i, *mp)
			}
			if m.Find(mp.Start) != mp || m.Find(mp.End-1) != mp {
				t.Fatalf("Find does not find mapping %d", i)
			}
		}
	})
}

func FuzzOpenELF(f *testing.F) {
	if vdso := selfVDSO(); vdso != nil {
		f.Add(vdso)
	}
	if _, err := exec.LookPath("gcc"); err == nil {
		lib := filepath.Join(f.TempDir(), "libfixlib.so")
		gcc(f, "-O0", "-shared", "-fPIC", "-o", lib, filepath.Join("testdata", "fixlib.c"))
		data, err := os.ReadFile(lib)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(elfHeader(elf.ELFCLASS32, elf.ET_EXEC, 0, 0))
	f.Add(elfHeader(elf.ELFCLASS64, elf.ET_DYN, 0, 0))
	f.Add(elfHeader(elf.ELFCLASS64, elf.ET_DYN, 0x80, 0xffff))
	f.Add([]byte("\x7fELF"))
	f.Add(make([]byte, 256))
	// One file per worker, rewritten for each input: creating and removing
	// a directory per input is slow on disks mounted with discard.
	p := filepath.Join(f.TempDir(), "file")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ef, err := OpenELF(p)
		if err != nil {
			return
		}
		syms := ef.Symbols()
		for i := range syms {
			if i > 0 && syms[i-1].Value >= syms[i].Value {
				t.Fatalf("symbols out of order: %+v, %+v", syms[i-1], syms[i])
			}
			ef.Lookup(syms[i].Value)
			ef.Lookup(syms[i].Value + syms[i].Size)
		}
		for _, s := range ef.Loads {
			m := &Mapping{Start: 0x7f0000000000, End: 0x7f0000010000, Perms: "r-xp", Offset: s.Offset &^ 0xfff}
			if v, ok := ef.VAddr(m, m.Start+s.Offset&0xfff); ok {
				ef.Lookup(v)
			}
		}
		maps := &Maps{Mappings: []Mapping{{Start: 0x10000, End: 0x20000, Perms: "r-xp", Dev: "00:00", Inode: 1, Path: p}}}
		NewSymbolizer().Symbolize(0, maps, []uint64{0x10000, 0x10100, 0x1ffff})
	})
}
