package tracer

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Where a function's entry probe goes.
//
// A uprobe costs what the kernel does with the instruction it replaces. It
// emulates a push of a register (glibc's malloc starts with push %r12), a
// relative jump or call, a conditional jump and the usual NOPs: one trap.
// Any other
// instruction is single-stepped out of line: a second trap, the debug
// exception, which costs about 9 us on this project's VMs against under 1
// us for the rest of the probe. glibc's free starts with
//
//	test %rdi,%rdi
//	je   <return>
//	push %rbp
//
// and a probe on the push sees every free of a non-null pointer, with the
// same registers and stack pointer as at the entry, for an eighth of the
// cost of a malloc/free pair (testdata/pairs: 10.1 us -> 1.27 us per pair
// with empty probes). free(NULL), which the probes ignore anyway, then
// costs nothing. jemalloc's malloc starts with "cmp $0x1000,%rdi; ja
// <large>", and its free with ten register moves and loads before its
// first branch: their probes go on those branches (19.7 us -> 1.9 us per
// pair under mdtrace).
//
// probePoint moves an entry probe past such a prologue when it is safe:
//   - The instructions skipped change nothing the probes read: no memory,
//     no stack or frame pointer, none of the function's argument
//     registers. They compare, or move, load and compute into other
//     registers (and, skipped, run before the probe instead of after it).
//     With nullSkipped (a function whose probe ignores a null first
//     argument: free), a "test %rdi,%rdi" may be followed by a je, and the
//     probe goes on the fall-through path, the one a non-null pointer
//     takes; or, when that path reaches no instruction the kernel
//     emulates, on the je itself.
//   - It lands on an instruction the kernel emulates: a push of a register,
//     a jump or call, or a conditional jump. Every call passes it once, as
//     it passes the entry. Otherwise nothing would be saved, and the entry
//     is kept.
//   - With verify_pointers (noDeref), nothing skipped reads memory through
//     a register derived from the arguments. An entry-only probe that
//     knows how far the stack moved (stackMoves) may skip "sub $n,%rsp".
//   - The whole function decodes, and no jump or call in it goes to the
//     instructions skipped or to the probe point (a probe reached twice
//     would count a call twice).
//
// Otherwise, and whenever the function cannot be read or decoded, the probe
// stays on the entry.

// maxProbeScan bounds the bytes of a function decoded to look for jumps.
const maxProbeScan = 64 << 10

// maxSkipped bounds the instructions skipped before the probe point.
const maxSkipped = 16

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

// entryUse is what an entry probe reads of a call: the first args argument
// registers and the stack and frame pointers, and, with nullSkipped,
// nothing of a call whose first argument is null. With noDeref the
// instructions skipped may not read memory at an address computed from the
// arguments: verify_pointers must see a bad pointer before the allocator
// reads through it and faults.
type entryUse struct {
	args        int
	nullSkipped bool
	noDeref     bool
	// stackMoves: the probe has no return probe and reads the stack at
	// the entry's stack pointer, wherever it is (a C++ runtime's new, see
	// runtimeNews): "sub $n,%rsp" may be skipped (see stackDelta).
	stackMoves bool
}

// probePoint returns where in the function at fs to put its entry probe:
// fs.off itself, or the offset past a prologue that changes nothing the
// probe reads (see above). r reads the file.
func probePoint(r io.ReaderAt, fs funcSym, use entryUse) uint64 {
	if fs.size == 0 || fs.size > maxProbeScan {
		return fs.off
	}
	code := make([]byte, fs.size)
	if _, err := r.ReadAt(code, int64(fs.off)); err != nil {
		return fs.off
	}
	at, ok := skipPrologue(code, use)
	if !ok || at == 0 {
		return fs.off
	}
	jumps, ok := branches(code)
	if !ok {
		return fs.off
	}
	for _, j := range jumps {
		// Nothing may reach the instructions skipped or the probe
		// point: a probe hit twice would count a call twice.
		if j.to > 0 && j.to <= at {
			return fs.off
		}
	}
	return fs.off + uint64(at)
}

// skipPrologue returns the offset in code of the first instruction the
// kernel emulates (see emulated) past instructions that change nothing use
// says the probe reads; ok is false when there is none within maxSkipped
// instructions.
func skipPrologue(code []byte, use entryUse) (at int, ok bool) {
	nullTested := false
	// The registers whose value derives from the arguments.
	var tainted uint32
	for _, r := range argRegs[:min(use.args, len(argRegs))] {
		tainted |= 1 << r
	}
	// The null test's je, where the probe goes when the path past it
	// reaches no instruction the kernel emulates: it sees null pointers
	// too, which the probe ignores (jemalloc's sized delete: test, je,
	// then sub $8,%rsp).
	je := -1
	fail := func() (int, bool) {
		if je >= 0 {
			return je, true
		}
		return at, false
	}
	for i := 0; i <= maxSkipped && at < len(code); i++ {
		inst, err := decode(code[at:]) // endbr64 is a NOP: harmless
		if err != nil {
			return fail()
		}
		tested := nullTested
		nullTested = false
		switch {
		case inst.Op == x86asm.JE && tested && emulated(inst):
			// The null path leaves, unprobed: the probe ignores a
			// null pointer.
			rel, _ := inst.Args[0].(x86asm.Rel)
			je = at
			at += inst.Len
			if target := at + int(rel); target <= at || target >= len(code) {
				return fail()
			}
			continue
		case emulated(inst):
			return at, true
		case inst.Op == x86asm.TEST && inst.Args[0] == x86asm.RDI && inst.Args[1] == x86asm.RDI:
			nullTested = use.nullSkipped
		case use.stackMoves && stackSub(inst) > 0:
			at += inst.Len
			continue
		case !harmless(inst, use.args), use.noDeref && derefs(inst, tainted):
			return fail()
		}
		tainted = taint(inst, tainted)
		at += inst.Len
	}
	return fail()
}

// emulated reports whether the kernel emulates inst when it is probed,
// instead of single-stepping it: a push of a 64-bit register, a relative
// jump or call, a conditional jump without prefixes.
func emulated(inst x86asm.Inst) bool {
	switch {
	case inst.Op == x86asm.PUSH:
		return isReg64(inst.Args[0])
	case inst.Op == x86asm.JMP, inst.Op == x86asm.CALL, isConditionalJump(inst.Op):
		// The kernel refuses a branch with an operand-size prefix.
		return isRel(inst.Args[0]) && !slices.ContainsFunc(inst.Prefix[:], func(p x86asm.Prefix) bool {
			return p&0xff == x86asm.PrefixDataSize
		})
	}
	return false
}

// stackSub returns n for "sub $n,%rsp" with n > 0, else 0.
func stackSub(inst x86asm.Inst) int {
	if inst.Op != x86asm.SUB || inst.Args[0] != x86asm.RSP {
		return 0
	}
	n, ok := inst.Args[1].(x86asm.Imm)
	if !ok || n <= 0 || n >= 1<<16 {
		return 0
	}
	return int(n)
}

// stackDelta returns how far below the entry's the stack pointer is at
// offset at of code, past the prologue skipPrologue skipped: the sum of
// its "sub $n,%rsp".
func stackDelta(code []byte, at int) int {
	delta := 0
	for pc := 0; pc < at; {
		inst, err := decode(code[pc:])
		if err != nil {
			return delta
		}
		delta += stackSub(inst)
		pc += inst.Len
	}
	return delta
}

// The general registers by number, as regNum gives them.
const (
	regRAX = iota
	regRCX
	regRDX
	regRBX
	regRSP
	regRBP
	regRSI
	regRDI
	regR8
	regR9
)

// argRegs are the registers of a call's arguments, in order.
var argRegs = []int{regRDI, regRSI, regRDX, regRCX, regR8, regR9}

// regNum returns the number of the 64-bit general register that r is part
// of, or -1 if r is no part of one.
func regNum(r x86asm.Reg) int {
	switch {
	case r >= x86asm.AL && r <= x86asm.BL:
		return int(r - x86asm.AL)
	case r >= x86asm.AH && r <= x86asm.BH:
		return int(r - x86asm.AH)
	case r >= x86asm.SPB && r <= x86asm.R15B:
		return regRSP + int(r-x86asm.SPB)
	case r >= x86asm.AX && r <= x86asm.R15W:
		return int(r - x86asm.AX)
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return int(r - x86asm.EAX)
	case r >= x86asm.RAX && r <= x86asm.R15:
		return int(r - x86asm.RAX)
	}
	return -1
}

// harmless reports whether inst, run before a probe instead of after it,
// changes nothing the probe reads of a function with args arguments: it
// compares, or it writes one general register (and the flags) that is not
// an argument's, the stack pointer or the frame pointer, and no memory. It
// may read memory: where that faults, the call would have faulted anyway.
func harmless(inst x86asm.Inst, args int) bool {
	switch inst.Op {
	case x86asm.TEST, x86asm.CMP, x86asm.NOP:
		return true
	case x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD, x86asm.LEA,
		x86asm.ADD, x86asm.SUB, x86asm.AND, x86asm.OR, x86asm.XOR,
		x86asm.SHL, x86asm.SHR, x86asm.SAR, x86asm.NEG, x86asm.NOT, x86asm.INC, x86asm.DEC:
	default:
		return false
	}
	dst, ok := inst.Args[0].(x86asm.Reg)
	if !ok {
		return false
	}
	n := regNum(dst)
	if n < 0 || n == regRSP || n == regRBP || slices.Contains(argRegs[:min(args, len(argRegs))], n) {
		return false
	}
	return true
}

// isTainted reports whether an instruction argument reads a register of
// tainted: a register, or a memory operand's base or index.
func isTainted(a x86asm.Arg, tainted uint32) bool {
	switch a := a.(type) {
	case x86asm.Reg:
		n := regNum(a)
		return n >= 0 && tainted&(1<<n) != 0
	case x86asm.Mem:
		return isTainted(a.Base, tainted) || isTainted(a.Index, tainted)
	}
	return false
}

// derefs reports whether inst reads memory at an address computed from a
// register of tainted (lea computes an address without reading it).
func derefs(inst x86asm.Inst, tainted uint32) bool {
	if inst.Op == x86asm.LEA || inst.Op == x86asm.NOP {
		return false
	}
	for _, a := range inst.Args {
		if m, ok := a.(x86asm.Mem); ok && isTainted(m, tainted) {
			return true
		}
	}
	return false
}

// taint returns the registers deriving from the arguments after inst, one
// that harmless allows: its destination derives from them if a source does
// or, when the instruction also reads it or writes only its low 8 or 16
// bits, if it did.
func taint(inst x86asm.Inst, tainted uint32) uint32 {
	dst, ok := inst.Args[0].(x86asm.Reg)
	n := regNum(dst)
	if !ok || n < 0 {
		return tainted
	}
	keeps := dst < x86asm.EAX // a partial write keeps the upper bits
	from := false
	switch inst.Op {
	case x86asm.TEST, x86asm.CMP, x86asm.NOP:
		return tainted
	case x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD, x86asm.LEA:
	default:
		// Read-modify-write: add, and, shr, neg, ...
		keeps = true
	}
	for _, a := range inst.Args[1:] {
		from = from || isTainted(a, tainted)
	}
	if from || keeps && tainted&(1<<n) != 0 {
		return tainted | 1<<n
	}
	return tainted &^ (1 << n)
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

// ProbeOffset returns the file offset at which mdtrace probes the entry of
// an allocator function of an ELF file: the function's own, or a point past
// its prologue (see probePoint).
func ProbeOffset(path, symbol string) (uint64, error) {
	fs, err := funcNamed(path, symbol)
	if err != nil {
		return 0, err
	}
	use := entryUse{args: 1}
	for _, ep := range entryPoints {
		if ep.symbol == symbol {
			use = ep.use(false)
		}
	}
	return entryPlacement(path, fs, use).off, nil
}

// placement is where a function's entry probe goes (see probePoint), with
// what Attach and --verbose need to know of it.
type placement struct {
	off     uint64 // the probe's file offset
	inst    string // the instruction there, "?" if unknown
	stepped bool   // the kernel single-steps it: a second trap each call
	delta   uint64 // how far below the entry's the stack pointer is there
	thunk   bool   // the function only jumps to another (endbr64, jmp)
	target  string // the function a thunk jumps to, "" if unknown
	// The file offsets of the executable segment holding the function,
	// for free with verify (see callerPages); 0, 0 if not looked up.
	segStart, segEnd uint64
}

// pointKey names a function of a file, as it is, and how it is probed.
type pointKey struct {
	file fileID
	off  uint64
	use  entryUse
}

// pointCache remembers entryPlacement's answers: 4096 functions.
var pointCache = newMemo[pointKey, placement](4096)

// entryPlacement is the placement of the entry probe of the function fs of
// the file at path, remembered for the file as it is: each process of a
// build probes the same libc. A file that cannot be read keeps its entry.
func entryPlacement(path string, fs funcSym, use entryUse) placement {
	key := func(id fileID) pointKey { return pointKey{id, fs.off, use} }
	pl, _, err := fromFile(pointCache, path, key, func() (placement, error) {
		f, err := os.Open(path)
		if err != nil {
			return placement{}, err
		}
		defer f.Close()
		return place(f, path, fs, use), nil
	})
	if err != nil {
		return placement{off: fs.off, inst: "?", stepped: true}
	}
	return pl
}

// place finds the placement of the entry probe of the function fs of the
// file at path, read through r.
func place(r io.ReaderAt, path string, fs funcSym, use entryUse) placement {
	pl := placement{off: probePoint(r, fs, use), inst: "?", stepped: true}
	if inst, err := readInst(r, pl.off, false); err == nil {
		pl.inst, pl.stepped = strings.ToLower(inst.Op.String()), !emulated(inst)
		if endbrAt(r, pl.off) {
			pl.inst = "endbr64"
		}
	}
	if n := pl.off - fs.off; n > 0 {
		if code := make([]byte, n); readFull(r, code, fs.off) {
			pl.delta = uint64(stackDelta(code, len(code)))
		}
	}
	// The extent of the code around the function tells the allocator's
	// own calls from the program's.
	if !use.stackMoves {
		pl.segStart, pl.segEnd = execSegment(r, fs.off)
	}
	// A thunk: endbr64, then a jump.
	at := fs.off
	if endbrAt(r, at) {
		at += uint64(len(endbr64))
	}
	if inst, err := readInst(r, at, false); err == nil && inst.Op == x86asm.JMP {
		pl.thunk = true
		if rel, ok := inst.Args[0].(x86asm.Rel); ok {
			pl.target = functionAt(r, path, uint64(int64(at)+int64(inst.Len)+int64(rel)))
		}
	}
	return pl
}

// endbrAt reports whether an endbr64 is at offset off of r.
func endbrAt(r io.ReaderAt, off uint64) bool {
	head := make([]byte, len(endbr64))
	return readFull(r, head, off) && bytes.Equal(head, endbr64)
}

// readFull reads len(b) bytes at offset off of r.
func readFull(r io.ReaderAt, b []byte, off uint64) bool {
	n, err := r.ReadAt(b, int64(off))
	return n == len(b) && (err == nil || err == io.EOF)
}

// readInst decodes the instruction at offset off of r, or, with pastEndbr,
// the one after an endbr64 there.
func readInst(r io.ReaderAt, off uint64, pastEndbr bool) (x86asm.Inst, error) {
	code := make([]byte, 20)
	n, err := r.ReadAt(code, int64(off))
	if n == 0 {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return x86asm.Inst{}, err
	}
	code = code[:n]
	if pastEndbr {
		code = bytes.TrimPrefix(code, endbr64)
	}
	return decode(code)
}

// execSegment returns the file offsets of the executable segment of the
// ELF file read through r that holds offset off, or 0, 0.
func execSegment(r io.ReaderAt, off uint64) (start, end uint64) {
	f, err := elf.NewFile(r)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	if p, ok := segmentAt(textSegments(f), off); ok {
		return p.Off, p.Off + p.Filesz
	}
	return 0, 0
}

// textSegments returns the executable PT_LOAD segments of f.
func textSegments(f *elf.File) []elf.ProgHeader {
	var text []elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = append(text, p.ProgHeader)
		}
	}
	return text
}

// segmentAt returns the segment of segs that holds file offset off.
func segmentAt(segs []elf.ProgHeader, off uint64) (elf.ProgHeader, bool) {
	for _, p := range segs {
		if p.Off <= off && off < p.Off+p.Filesz {
			return p, true
		}
	}
	return elf.ProgHeader{}, false
}

// callerPages is what free's entry probe carries in its cookie's high half
// with verify: how many pages the executable segment holding it reaches
// below the probe (low 16 bits) and above it (high 16 bits), so that the
// probe can tell a call of free from the allocator's own code (see
// thread_cache_free in bpf/free.h). 0 if unknown or too far.
func callerPages(pl placement) uint64 {
	if pl.segEnd <= pl.segStart || pl.off < pl.segStart || pl.off >= pl.segEnd {
		return 0
	}
	const page = 4096
	below := (pl.off - pl.segStart + page - 1) / page
	above := (pl.segEnd - pl.off + page - 1) / page
	if below >= 1<<16 || above >= 1<<16 {
		return 0
	}
	return below | above<<16
}
