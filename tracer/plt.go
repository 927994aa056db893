package tracer

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"

	"golang.org/x/arch/x86/x86asm"
)

// Where a thunk goes. jemalloc's operator delete[] is "jmp free@plt", its
// new[] a jump to its own new, libstdc++'s new[] "jmp operator new@plt":
// a probe on the thunk adds nothing where the function it jumps to is
// probed too (and for a delete, a return probe and a nested free).

// functionAt returns the name of the function at file offset off of the
// file at path, read through r: one of the file's own, or the function a
// PLT stub there is bound to by its relocation; "" when it is not known.
func functionAt(r io.ReaderAt, path string, off uint64) string {
	if offsets, err := funcOffsets(path); err == nil {
		for name, f := range offsets {
			if f.off == off {
				return name
			}
		}
	}
	name, _ := stubTarget(r, path, off)
	return name
}

// stubTarget returns the function the PLT stub at file offset off of the
// file at path, read through r, is bound to: the symbol of the relocation
// of the GOT slot its "jmp *slot(%rip)" reads.
func stubTarget(r io.ReaderAt, path string, off uint64) (string, bool) {
	g, _, err := fromFile(gotCache, path, byID, func() (gotSlots, error) { return readGOT(path) })
	if err != nil {
		return "", false
	}
	vaddr, ok := g.vaddr(off)
	if !ok {
		return "", false
	}
	inst, err := readInst(r, off, true)
	if err != nil || inst.Op != x86asm.JMP {
		return "", false
	}
	m, isMem := inst.Args[0].(x86asm.Mem)
	if !isMem || m.Base != x86asm.RIP || m.Index != 0 {
		return "", false
	}
	// The jump's address is relative to its end, past any endbr64.
	skipped := uint64(0)
	if endbrAt(r, off) {
		skipped = uint64(len(endbr64))
	}
	name, ok := g.slots[uint64(int64(vaddr+skipped)+int64(inst.Len)+m.Disp)]
	return name, ok
}

// gotSlots are the GOT slots of an ELF file with the functions their
// relocations bind them to, and its executable segments, to turn file
// offsets into addresses.
type gotSlots struct {
	slots map[uint64]string
	text  []elf.ProgHeader
}

// vaddr returns the address of file offset off in an executable segment.
func (g gotSlots) vaddr(off uint64) (uint64, bool) {
	p, ok := segmentAt(g.text, off)
	return off - p.Off + p.Vaddr, ok
}

// gotCache remembers readGOT's answers: 64 files.
var gotCache = newMemo[fileID, gotSlots](64)

// x86-64 relocation types of GOT slots bound to a symbol.
const (
	rX86_64GlobDat  = 6
	rX86_64JumpSlot = 7
)

// readGOT reads the JUMP_SLOT and GLOB_DAT relocations of the ELF file at
// path. A malformed file is an error: debug/elf's panics are recovered.
func readGOT(path string) (_ gotSlots, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reading %s: malformed ELF file: %v", path, p)
		}
	}()
	f, err := elf.Open(path)
	if err != nil {
		return gotSlots{}, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return gotSlots{}, err
	}
	g := gotSlots{slots: map[uint64]string{}, text: textSegments(f)}
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_RELA {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			return gotSlots{}, err
		}
		for ; len(data) >= 24; data = data[24:] {
			off := binary.LittleEndian.Uint64(data)
			info := binary.LittleEndian.Uint64(data[8:])
			sym, typ := info>>32, info&0xffffffff
			if (typ == rX86_64JumpSlot || typ == rX86_64GlobDat) && sym > 0 && int(sym) <= len(syms) {
				name, _, _ := bytes.Cut([]byte(syms[sym-1].Name), []byte("@"))
				g.slots[off] = string(name)
			}
		}
	}
	return g, nil
}
