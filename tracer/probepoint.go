package tracer

import (
	"bytes"
	"errors"
	"io"
	"os"

	"golang.org/x/arch/x86/x86asm"
)

// Where a function's entry probe goes.
//
// A uprobe costs what the kernel does with the instruction it replaces. It
// emulates a push of a register (glibc's malloc starts with push %r12): one
// trap. Most other instructions are single-stepped out of line: a second
// trap, the debug exception, which costs about 9 us on this project's VMs
// against under 1 us for the rest of the probe. glibc's free starts with
//
//	test %rdi,%rdi
//	je   <return>
//	push %rbp
//
// and a probe on the push sees every free of a non-null pointer, with the
// same registers and stack pointer as at the entry, for an eighth of the
// cost of a malloc/free pair (testdata/pairs: 10.1 us -> 1.27 us per pair
// with empty probes). free(NULL), which the probes ignore anyway, then
// costs nothing.
//
// probePoint moves an entry probe past such a prologue when it is safe:
//   - The instructions skipped change nothing but the flags: endbr64, test
//     and cmp (not a 5-byte NOP, which the kernel probes without a trap).
//     With nullSkipped (a function whose probe ignores a null first
//     argument: free), a "test %rdi,%rdi" may be followed by a je/jz, and
//     the probe goes on the fall-through path, the one a non-null pointer
//     takes.
//   - It lands on a push of a register, which the kernel emulates.
//     Otherwise nothing would be saved, and the entry is kept.
//   - The whole function decodes, and no jump or call in it goes to the
//     instructions skipped or to the probe point (a probe reached twice
//     would count a free twice); the je's target is in the function.
//
// Otherwise, and whenever the function cannot be read or decoded, the probe
// stays on the entry.

// maxProbeScan bounds the bytes of a function decoded to look for jumps.
const maxProbeScan = 64 << 10

// maxSkipped bounds the instructions skipped before the probe point.
const maxSkipped = 4

// endbr64 starts functions built with -fcf-protection; it does nothing
// the probes could see. x86asm does not know it.
var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// decode decodes the instruction at the start of code, endbr64 as a NOP.
// An instruction x86asm names no operation for is an error: it is not
// decoded, and its length may be wrong.
func decode(code []byte) (x86asm.Inst, error) {
	if bytes.HasPrefix(code, endbr64) {
		return x86asm.Inst{Op: x86asm.NOP, Len: len(endbr64), Mode: 64}, nil
	}
	inst, err := x86asm.Decode(code, 64)
	if err == nil && inst.Op == 0 {
		err = errUnknownInst
	}
	return inst, err
}

var errUnknownInst = errors.New("unknown instruction")

// probePoint returns where in the function at fs to put its entry probe:
// fs.off itself, or the offset of a push past a prologue that changes
// nothing the probe reads (see above). r reads the file.
func probePoint(r io.ReaderAt, fs funcSym, nullSkipped bool) uint64 {
	if fs.size == 0 || fs.size > maxProbeScan {
		return fs.off
	}
	code := make([]byte, fs.size)
	if _, err := r.ReadAt(code, int64(fs.off)); err != nil {
		return fs.off
	}
	at, ok := skipPrologue(code, nullSkipped)
	if !ok || at == 0 || jumpsInto(code, at) {
		return fs.off
	}
	return fs.off + uint64(at)
}

// skipPrologue returns the offset in code of the push a probe can go on,
// past instructions that change only the flags; ok is false when there is
// none within maxSkipped instructions.
func skipPrologue(code []byte, nullSkipped bool) (at int, ok bool) {
	nullTested := false
	for i := 0; i <= maxSkipped && at < len(code); i++ {
		if bytes.HasPrefix(code[at:], endbr64) {
			at += len(endbr64)
			continue
		}
		inst, err := decode(code[at:])
		if err != nil {
			return 0, false
		}
		switch {
		case inst.Op == x86asm.PUSH && isReg64(inst.Args[0]):
			return at, true
		case inst.Op == x86asm.TEST || inst.Op == x86asm.CMP:
			nullTested = nullSkipped && inst.Op == x86asm.TEST &&
				inst.Args[0] == x86asm.RDI && inst.Args[1] == x86asm.RDI
			at += inst.Len
			continue
		case inst.Op == x86asm.JE && nullTested:
			// The null path leaves; the probe goes on the other one,
			// which must be taken only from here.
			rel, ok := inst.Args[0].(x86asm.Rel)
			if !ok {
				return 0, false
			}
			at += inst.Len
			if target := at + int(rel); target <= at || target >= len(code) {
				return 0, false
			}
			nullTested = false
			continue
		}
		return 0, false
	}
	return 0, false
}

// isReg64 reports whether an instruction argument is a 64-bit general
// register.
func isReg64(a x86asm.Arg) bool {
	r, ok := a.(x86asm.Reg)
	return ok && r >= x86asm.RAX && r <= x86asm.R15
}

// jumpsInto reports whether a relative jump or call in code goes to an
// offset in (0, at], or whether code cannot be decoded to its end.
func jumpsInto(code []byte, at int) bool {
	for pc := 0; pc < len(code); {
		inst, err := decode(code[pc:])
		if err != nil {
			// Padding after the last instruction decodes; anything
			// else the decoder rejects may hide a jump.
			return true
		}
		pc += inst.Len
		if rel, ok := inst.Args[0].(x86asm.Rel); ok {
			if t := pc + int(rel); t > 0 && t <= at {
				return true
			}
		}
	}
	return false
}

// ProbeOffset returns the file offset at which mdtrace probes the entry of
// a function of an ELF file: the function's own, or a point past its
// prologue (see probePoint).
func ProbeOffset(path, symbol string) (uint64, error) {
	fs, err := funcNamed(path, symbol)
	if err != nil {
		return 0, err
	}
	return entryProbe(path, fs, symbol == "free"), nil
}

// pointKey names a function of a file, as it is, and how it is probed.
type pointKey struct {
	file        fileID
	off         uint64
	nullSkipped bool
}

// pointCache remembers entryProbe's answers: 4096 functions.
var pointCache = newMemo[pointKey, uint64](4096)

// entryProbe is probePoint for the function fs of the file at path,
// remembered for the file as it is: each process of a build probes the
// same libc. A file that cannot be read keeps its entries.
func entryProbe(path string, fs funcSym, nullSkipped bool) uint64 {
	if id, ok := statID(path); ok {
		if off, ok := pointCache.get(pointKey{id, fs.off, nullSkipped}); ok {
			return off
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return fs.off
	}
	defer f.Close()
	off := probePoint(f, fs, nullSkipped)
	if id, ok := fstatID(f); ok {
		pointCache.put(pointKey{id, fs.off, nullSkipped}, off)
	}
	return off
}
