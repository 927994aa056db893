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
// probePoints moves an entry probe past such a prologue when it is safe:
//   - The instructions skipped change nothing but the flags: endbr64, test
//     and cmp (not a 5-byte NOP, which the kernel probes without a trap).
//     With nullSkipped (a function whose probe ignores a null first
//     argument: free), a "test %rdi,%rdi" may be followed by a je/jz, and
//     the probe goes on the fall-through path, the one a non-null pointer
//     takes.
//   - It lands on an instruction the kernel emulates: a push of a register
//     or a jump. Otherwise nothing would be saved, and the entry is kept.
//   - A conditional jump in the prologue splits it: glibc 2.36's memalign
//     (and aligned_alloc) starts with "cmpb $0,initialized; je init; jmp
//     _mid_memalign". Each path gets a probe, the jump and the first
//     instruction at the je's target (single-stepped, but taken once per
//     process at most), when the fall-through path leaves at once with its
//     jump: a call passes one of them, once.
//   - The whole function decodes, and no jump or call in it goes to the
//     instructions skipped or to a probe point but the prologue's own (a
//     probe reached twice would count a call twice); targets are in the
//     function.
//
// Otherwise, and whenever the function cannot be read or decoded, the probe
// stays on the entry. Probes on the second path of a split go where the
// stack pointer is the entry's too, so return probes work there as well.

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

// probePoints returns where in the function at fs to put its entry probe:
// fs.off itself, or the offsets past a prologue that changes nothing the
// probe reads (see above), one per path the prologue branches to. r reads
// the file.
func probePoints(r io.ReaderAt, fs funcSym, nullSkipped bool) []uint64 {
	entry := []uint64{fs.off}
	if fs.size == 0 || fs.size > maxProbeScan {
		return entry
	}
	code := make([]byte, fs.size)
	if _, err := r.ReadAt(code, int64(fs.off)); err != nil {
		return entry
	}
	pro, ok := skipPrologue(code, nullSkipped)
	if !ok || pro.at == 0 {
		return entry
	}
	jumps, ok := branches(code)
	if !ok {
		return entry
	}
	for _, j := range jumps {
		// Nothing may reach the instructions skipped or the probe
		// points but the prologue itself: a probe hit twice would count
		// a call twice.
		if j.to > 0 && j.to <= pro.at || pro.other > 0 && j.to == pro.other && j.from != pro.branch {
			return entry
		}
	}
	out := []uint64{fs.off + uint64(pro.at)}
	if pro.other > 0 {
		out = append(out, fs.off+uint64(pro.other))
	}
	return out
}

// prologue is what skipPrologue found: the offset of the first probe
// point, and where the prologue branches, the offset of its other path's
// probe point (0 if none) and of the branch.
type prologue struct {
	at, other, branch int
}

// skipPrologue finds the probe points of code past instructions that
// change only the flags; ok is false when there is none within maxSkipped
// instructions. A point is on an instruction the kernel emulates (a push
// of a register, a jump), or, after a conditional jump, on the path it
// takes when the other path leaves at once (its first instruction is a
// jump): each call then passes one point, once.
func skipPrologue(code []byte, nullSkipped bool) (pro prologue, ok bool) {
	nullTested := false
	for i := 0; i <= maxSkipped && pro.at < len(code); i++ {
		if bytes.HasPrefix(code[pro.at:], endbr64) {
			pro.at += len(endbr64)
			continue
		}
		inst, err := decode(code[pro.at:])
		if err != nil {
			return pro, false
		}
		switch {
		case inst.Op == x86asm.PUSH && isReg64(inst.Args[0]), inst.Op == x86asm.JMP && isRel(inst.Args[0]):
			if pro.other > 0 && inst.Op != x86asm.JMP {
				// This path would run on into the other one.
				return pro, false
			}
			return pro, true
		case inst.Op == x86asm.TEST || inst.Op == x86asm.CMP:
			nullTested = nullSkipped && inst.Op == x86asm.TEST &&
				inst.Args[0] == x86asm.RDI && inst.Args[1] == x86asm.RDI
			pro.at += inst.Len
			continue
		case isConditionalJump(inst.Op) && pro.other == 0:
			rel, _ := inst.Args[0].(x86asm.Rel)
			from := pro.at
			pro.at += inst.Len
			target := pro.at + int(rel)
			if target <= pro.at || target >= len(code) {
				return pro, false
			}
			if inst.Op == x86asm.JE && nullTested {
				// The null path leaves, unprobed: the probe ignores
				// a null pointer.
				nullTested = false
				continue
			}
			pro.other, pro.branch = target, from
			continue
		}
		return pro, false
	}
	return pro, false
}

// isConditionalJump reports whether op is a jcc.
func isConditionalJump(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL,
		x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS:
		return true
	}
	return false
}

// isReg64 reports whether an instruction argument is a 64-bit general
// register.
func isReg64(a x86asm.Arg) bool {
	r, ok := a.(x86asm.Reg)
	return ok && r >= x86asm.RAX && r <= x86asm.R15
}

// isRel reports whether an instruction argument is a relative address.
func isRel(a x86asm.Arg) bool {
	_, ok := a.(x86asm.Rel)
	return ok
}

// jump is a relative jump or call in a function: the offsets of the
// instruction and of its target.
type jump struct {
	from, to int
}

// branches returns the relative jumps and calls of code; ok is false when
// code cannot be decoded to its end.
func branches(code []byte) (jumps []jump, ok bool) {
	for pc := 0; pc < len(code); {
		inst, err := decode(code[pc:])
		if err != nil {
			// Padding after the last instruction decodes; anything
			// else the decoder rejects may hide a jump.
			return nil, false
		}
		if rel, ok := inst.Args[0].(x86asm.Rel); ok {
			jumps = append(jumps, jump{pc, pc + inst.Len + int(rel)})
		}
		pc += inst.Len
	}
	return jumps, true
}

// ProbeOffsets returns the file offsets at which mdtrace probes the entry
// of a function of an ELF file: the function's own, or points past its
// prologue (see probePoints).
func ProbeOffsets(path, symbol string) ([]uint64, error) {
	fs, err := funcNamed(path, symbol)
	if err != nil {
		return nil, err
	}
	return entryProbes(path, fs, symbol == "free"), nil
}

// pointKey names a function of a file, as it is, and how it is probed.
type pointKey struct {
	file        fileID
	off         uint64
	nullSkipped bool
}

// pointCache remembers entryProbes' answers: 4096 functions.
var pointCache = newMemo[pointKey, []uint64](4096)

// entryProbes is probePoints for the function fs of the file at path,
// remembered for the file as it is: each process of a build probes the
// same libc. A file that cannot be read keeps its entries. Callers must
// not modify the slice.
func entryProbes(path string, fs funcSym, nullSkipped bool) []uint64 {
	key := func(id fileID) pointKey { return pointKey{id, fs.off, nullSkipped} }
	offs, _, err := fromFile(pointCache, path, key, func() ([]uint64, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return probePoints(f, fs, nullSkipped), nil
	})
	if err != nil {
		return []uint64{fs.off}
	}
	return offs
}
