//go:build linux

package tracer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/arch/x86/x86asm"

	"github.com/mdtrace/mdtrace/stacks"
)

// Bypasses: under --all the probes on the C library have no PID filter, so
// a process whose calls the shim takes (--all --inject) would still trap
// where the shim passes each call on to the allocator, and its calls would
// be seen twice. The shim passes them instead through a bypass of each
// function: a copy of its first instructions, up to and including the last
// one probed, then a jump to the instruction after it. The probed bytes are
// never executed in place; the copy runs the original instructions (read
// from the file, not from the process, where the probes' breakpoints are).
//
// An instruction is copied as it is when it does not depend on where it
// runs. A conditional jump becomes the opposite short jump over an
// absolute jump to its target, an unconditional relative jump an absolute
// one. Any other instruction that reads the instruction pointer (a
// RIP-relative operand, a call, a return) makes the function's bypass
// impossible: the shim then cannot be used there.

// bypassFuncs are the functions the shim passes calls on to, in the order
// of mdshim_inject_bypass's table (shim/inject.c): md_real_malloc, free,
// calloc, realloc and memalign, which the shim resolves by these names.
var bypassFuncs = []string{"__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc", "__libc_memalign"}

// bypassNone in the table keeps the shim's call to the function as it is:
// nothing in the function is probed.
const bypassNone = ^uint32(0)

// bypassMax is the most code a bypass blob carries: the shim's page.
const bypassMax = 4096

// errNoBypass is a function whose probed instructions cannot be copied.
var errNoBypass = errors.New("cannot be copied elsewhere")

// absJump is "jmp *0(%rip)" followed by the 8-byte target.
func absJump(code []byte, to uint64) []byte {
	code = append(code, 0xff, 0x25, 0, 0, 0, 0)
	return binary.LittleEndian.AppendUint64(code, to)
}

// jccCode returns the condition code (the low nibble of the opcode) of a
// conditional jump encoded in b, skipping branch-hint prefixes.
func jccCode(b []byte) (byte, bool) {
	for len(b) > 0 && (b[0] == 0x2e || b[0] == 0x3e || b[0] == 0xf2) {
		b = b[1:]
	}
	switch {
	case len(b) >= 1 && b[0] >= 0x70 && b[0] <= 0x7f:
		return b[0] & 0xf, true
	case len(b) >= 2 && b[0] == 0x0f && b[1] >= 0x80 && b[1] <= 0x8f:
		return b[1] & 0xf, true
	}
	return 0, false
}

// bypassCode returns the bypass of a function whose code (read from its
// file) starts at address at in the process, for probes at the offsets
// last and before from its start: the instructions up to and including
// the one at last, then a jump back after it. The bypass is to run at
// address dst: a RIP-relative operand is moved to address the same byte
// from there.
func bypassCode(code []byte, at uint64, last int, dst uint64) ([]byte, error) {
	var out []byte
	for off := 0; off <= last; {
		if off >= len(code) {
			return nil, errNoBypass
		}
		inst, err := decode(code[off:])
		if err != nil {
			return nil, fmt.Errorf("at +%d: %w", off, err)
		}
		raw := code[off : off+inst.Len]
		next := at + uint64(off+inst.Len)
		rel, isRel := inst.Args[0].(x86asm.Rel)
		switch {
		case inst.Op == x86asm.JMP && isRel:
			// Nothing after it runs: the bypass ends at its target.
			return absJump(out, uint64(int64(next)+int64(rel))), nil
		case isRel:
			cc, ok := jccCode(raw)
			if !ok {
				// call, loop, jrcxz: not copied.
				return nil, fmt.Errorf("%s at +%d: %w", inst.Op, off, errNoBypass)
			}
			// The opposite condition skips the 14-byte absolute jump.
			out = append(out, 0x70|(cc^1), 14)
			out = absJump(out, uint64(int64(next)+int64(rel)))
		case ripRelative(inst):
			if positionFree(x86asm.Inst{Op: inst.Op}) != nil || inst.PCRel != 4 {
				return nil, fmt.Errorf("%s at +%d: %w", inst.Op, off, errNoBypass)
			}
			disp := int64(int32(binary.LittleEndian.Uint32(raw[inst.PCRelOff:])))
			target := int64(next) + disp
			moved := target - int64(dst+uint64(len(out)+inst.Len))
			if moved != int64(int32(moved)) {
				return nil, fmt.Errorf("%s at +%d: %w (its operand is over 2 GiB from the bypass)", inst.Op, off, errNoBypass)
			}
			b := slices.Clone(raw)
			binary.LittleEndian.PutUint32(b[inst.PCRelOff:], uint32(int32(moved)))
			out = append(out, b...)
		default:
			if err := positionFree(inst); err != nil {
				return nil, fmt.Errorf("%s at +%d: %w", inst.Op, off, err)
			}
			out = append(out, raw...)
		}
		off += inst.Len
		if off > last {
			return absJump(out, next), nil
		}
	}
	return nil, errNoBypass
}

// ripRelative reports whether inst reads or writes memory at an address
// relative to the instruction pointer (not a jump).
func ripRelative(inst x86asm.Inst) bool {
	for _, a := range inst.Args {
		if m, ok := a.(x86asm.Mem); ok && m.Base == x86asm.RIP {
			return true
		}
	}
	return false
}

// positionFree checks that inst does the same wherever it runs.
func positionFree(inst x86asm.Inst) error {
	switch inst.Op {
	case x86asm.CALL, x86asm.RET, x86asm.JMP, x86asm.LCALL, x86asm.LJMP, x86asm.LRET,
		x86asm.SYSCALL, x86asm.INT, x86asm.UD2:
		return errNoBypass
	}
	for _, a := range inst.Args {
		switch a := a.(type) {
		case x86asm.Mem:
			if a.Base == x86asm.RIP || a.Index == x86asm.RIP {
				return errNoBypass
			}
		case x86asm.Reg:
			if a == x86asm.RIP {
				return errNoBypass
			}
		}
	}
	return nil
}

// fileProbes returns where the probes of the file at path are: the
// offsets, in the file, of its probed instructions.
func (p *Probes) fileProbes(path string) []uint64 {
	id, ok := statID(path)
	if !ok {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probeOffsets[id]
}

// Bypass returns the blob mdshim_inject_bypass takes for process pid, whose
// allocator is lib: the address of the page the code is to be mapped at
// (8 bytes), for each of bypassFuncs where its bypass starts in the code
// (4 bytes, or bypassNone), then the code. It is for a process whose allocator
// file the probes have without a PID filter (--all).
func (p *Probes) Bypass(pid int, lib stacks.File) ([]byte, error) {
	probed := p.fileProbes(lib.Path)
	if len(probed) == 0 {
		return nil, fmt.Errorf("%s is not probed", lib.Name)
	}
	offsets, err := funcOffsets(lib.Path)
	if err != nil {
		return nil, err
	}
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, ErrProcessGone)
	}
	fh, err := os.Open(lib.Path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	// The bypasses go in a page of their own near the library, for
	// its RIP-relative operands: the shim maps it there.
	text := codeMappings(pid, maps, lib)
	if len(text) == 0 {
		return nil, fmt.Errorf("process %d does not map %s's code", pid, lib.Name)
	}
	lo, hi := text[0].Start, text[0].End
	for _, m := range text[1:] {
		lo, hi = min(lo, m.Start), max(hi, m.End)
	}
	dst, ok := nearFreePage(maps, lo, hi)
	if !ok {
		return nil, fmt.Errorf("process %d has no free page within 2 GiB of %s's text", pid, lib.Name)
	}
	table := binary.LittleEndian.AppendUint64(nil, dst)
	table = append(table, make([]byte, 4*len(bypassFuncs))...)
	var out []byte
	for i, name := range bypassFuncs {
		fs, ok := offsets[name]
		if !ok {
			return nil, fmt.Errorf("%s has no %s", lib.Name, name)
		}
		if fs.size == 0 {
			// A probe past its entry could not be told apart.
			return nil, fmt.Errorf("%s's %s has no size in its symbol table", lib.Name, name)
		}
		last := -1
		for _, o := range probed {
			if o >= fs.off && o < fs.off+fs.size {
				last = max(last, int(o-fs.off))
			}
		}
		if last < 0 {
			binary.LittleEndian.PutUint32(table[8+4*i:], bypassNone)
			continue
		}
		at, ok := addressOf(text, fs.off)
		if !ok {
			return nil, fmt.Errorf("process %d does not map %s's %s", pid, lib.Name, name)
		}
		// The instructions up to the last probe, and the longest one
		// after it.
		buf := make([]byte, last+16)
		n, _ := fh.ReadAt(buf, int64(fs.off))
		for len(out)%16 != 0 {
			out = append(out, 0xcc)
		}
		b, err := bypassCode(buf[:n], at, last, dst+uint64(len(out)))
		if err != nil {
			return nil, fmt.Errorf("%s's %s: %w", lib.Name, name, err)
		}
		binary.LittleEndian.PutUint32(table[8+4*i:], uint32(len(out)))
		out = append(out, b...)
	}
	if len(out) > bypassMax {
		return nil, fmt.Errorf("the bypasses of %s take %d bytes, over %d", lib.Name, len(out), bypassMax)
	}
	return append(table, out...), nil
}

// codeMappings returns the executable mappings of lib in process pid,
// whose maps are maps.
func codeMappings(pid int, maps *stacks.Maps, lib stacks.File) []stacks.Mapping {
	want, err := os.Stat(lib.Path)
	if err != nil {
		return nil
	}
	var out []stacks.Mapping
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		if m.Inode == 0 || len(m.Perms) < 3 || m.Perms[2] != 'x' {
			continue
		}
		if fi, err := os.Stat(stacks.MappedFile(pid, m).Path); err == nil && os.SameFile(fi, want) {
			out = append(out, *m)
		}
	}
	return out
}

// nearMax is how far the bypasses' page may be from the code it copies:
// a RIP-relative operand reaches 2 GiB, less a margin for the data the
// library's code addresses beyond its code.
const nearMax = 1 << 30

// nearFreePage returns the address of a free page between the mappings
// of maps, as close as can be to the code at lo to hi, and within nearMax
// of all of it.
func nearFreePage(maps *stacks.Maps, lo, hi uint64) (uint64, bool) {
	page := uint64(os.Getpagesize())
	var best uint64
	found := false
	dist := func(a uint64) uint64 {
		if a < lo {
			return hi - a
		}
		return a + page - lo
	}
	prevEnd := uint64(0x10000)
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		if m.Start >= prevEnd+page {
			for _, a := range []uint64{m.Start - page, prevEnd} {
				if dist(a) <= nearMax && (!found || dist(a) < dist(best)) {
					best, found = a, true
				}
			}
		}
		prevEnd = max(prevEnd, m.End)
	}
	return best, found
}

// addressOf returns where the byte at offset off of a file is in the
// process that maps its code at text (codeMappings).
func addressOf(text []stacks.Mapping, off uint64) (uint64, bool) {
	for _, m := range text {
		if off >= m.Offset && off < m.Offset+(m.End-m.Start) {
			return m.Start + off - m.Offset, true
		}
	}
	return 0, false
}

// Bypassed counts the functions a blob of Bypass covers.
func Bypassed(blob []byte) int {
	n := 0
	for i := range bypassFuncs {
		if 8+4*i+4 <= len(blob) && binary.LittleEndian.Uint32(blob[8+4*i:]) != bypassNone {
			n++
		}
	}
	return n
}
