//go:build linux

package tracer

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/mdtrace/mdtrace/leak"
)

// Hand-assembled x86-64 instructions for the prologues probePoint reads.
var (
	testRDI   = []byte{0x48, 0x85, 0xff}                         // test %rdi,%rdi
	testRSI   = []byte{0x48, 0x85, 0xf6}                         // test %rsi,%rsi
	cmpbRIP   = []byte{0x80, 0x3d, 0x10, 0x00, 0x00, 0x00, 0x00} // cmpb $0x0,0x10(%rip)
	pushRBP   = []byte{0x55}                                     // push %rbp
	pushR12   = []byte{0x41, 0x54}                               // push %r12
	movRDIRBX = []byte{0x48, 0x89, 0xfb}                         // mov %rdi,%rbx
	popRBP    = []byte{0x5d}                                     // pop %rbp
	ret       = []byte{0xc3}
	nop       = []byte{0x90}
	xchgAX    = []byte{0x66, 0x90}                               // xchg %ax,%ax: a 2-byte NOP
	subRSP    = []byte{0x48, 0x83, 0xec, 0x18}                   // sub $0x18,%rsp
	movRDIRAX = []byte{0x48, 0x89, 0xf8}                         // mov %rdi,%rax
	movRIPRDX = []byte{0x48, 0x8b, 0x15, 0x10, 0x00, 0x00, 0x00} // mov 0x10(%rip),%rdx
	movRDIRCX = []byte{0x48, 0x89, 0xf9}                         // mov %rdi,%rcx
	shrRAX    = []byte{0x48, 0xc1, 0xe8, 0x1a}                   // shr $0x1a,%rax
	andEAX    = []byte{0x25, 0xf0, 0x00, 0x00, 0x00}             // and $0xf0,%eax
	addFSRAX  = []byte{0x64, 0x48, 0x03, 0x04, 0x25, 0, 0, 0, 0} // add %fs:0x0,%rax
	cmpRAXRCX = []byte{0x48, 0x3b, 0x88, 0xb0, 0x01, 0x00, 0x00} // cmp 0x1b0(%rax),%rcx
	movRSIRDI = []byte{0x48, 0x89, 0xf7}                         // mov %rsi,%rdi
	movzblESI = []byte{0x0f, 0xb6, 0x34, 0x02}                   // movzbl (%rdx,%rax,1),%esi
	movbDIL   = []byte{0x40, 0xb7, 0x00}                         // mov $0x0,%dil
	movRDIRBP = []byte{0x48, 0x89, 0xfd}                         // mov %rdi,%rbp
	movRAXRIP = []byte{0x48, 0x89, 0x05, 0x10, 0x00, 0x00, 0x00} // mov %rax,0x10(%rip)
	mulRSI    = []byte{0x48, 0xf7, 0xe6}                         // mul %rsi
	cmpRDI    = []byte{0x48, 0x81, 0xff, 0x00, 0x10, 0x00, 0x00} // cmp $0x1000,%rdi
	leaRAX    = []byte{0x48, 0x8d, 0x47, 0x07}                   // lea 0x7(%rdi),%rax
	je16      = []byte{0x66, 0x74, 0x02}                         // data16 je .+5
	movHeader = []byte{0x48, 0x8b, 0x47, 0xf8}                   // mov -0x8(%rdi),%rax
	movRAXRCX = []byte{0x48, 0x8b, 0x08}                         // mov (%rax),%rcx
	movEAX0   = []byte{0xb8, 0x00, 0x00, 0x00, 0x00}             // mov $0x0,%eax
	movAL0    = []byte{0xb0, 0x00}                               // mov $0x0,%al
)

// jemallocFree is how jemalloc 5.3's free starts: register moves, loads and
// arithmetic (the last load at an address computed from the pointer), then
// its first branch, at offset 38.
var jemallocFree = code(movRDIRAX, movRIPRDX, movRDIRCX, shrRAX, andEAX, addFSRAX, cmpRAXRCX, jne(1), ret, ret)

func je(rel int8) []byte { return []byte{0x74, byte(rel)} }

// jmp rel32
func jmp32(rel int32) []byte {
	return []byte{0xe9, byte(rel), byte(rel >> 8), byte(rel >> 16), byte(rel >> 24)}
}

func jne(rel int8) []byte { return []byte{0x75, byte(rel)} }

func jmp(rel int8) []byte { return []byte{0xeb, byte(rel)} }

func ja(rel int8) []byte { return []byte{0x77, byte(rel)} }

// call rel32
func call(rel int32) []byte {
	return []byte{0xe8, byte(rel), byte(rel >> 8), byte(rel >> 16), byte(rel >> 24)}
}

func code(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestProbePoint(t *testing.T) {
	free := entryUse{args: 1, nullSkipped: true}
	one, two, three := entryUse{args: 1}, entryUse{args: 2}, entryUse{args: 3}
	// verify_pointers: nothing skipped reads through the pointer.
	strict, strictFree := entryUse{args: 1, noDeref: true}, entryUse{args: 1, nullSkipped: true, noDeref: true}
	entryOnly := entryUse{args: 1, stackMoves: true}
	many := slices.Repeat([][]byte{cmpbRIP}, maxSkipped)
	for _, tc := range []struct {
		name string
		code []byte
		use  entryUse
		want int // offset from the entry
	}{
		// glibc 2.36's free: the probe goes on the push, past the null test.
		{"free", code(testRDI, je(4), pushRBP, popRBP, ret, nop, nop, ret), free, 5},
		{"free with endbr64", code(endbr64, testRDI, je(2), pushRBP, ret, ret), free, 9},
		// A probe that sees null pointers goes on the je, which every
		// call passes.
		{"null test, null not skipped", code(testRDI, je(2), pushRBP, ret, ret), one, 3},
		{"null path falls through", code(testRDI, jne(2), pushRBP, ret, ret), free, 3},
		{"other register tested", code(testRSI, je(2), pushRBP, ret, ret), free, 3},
		// glibc's posix_memalign and valloc: a compare, then a push.
		{"compare then push", code(cmpbRIP, pushR12, ret), one, 7},
		// Already emulated: nothing to gain.
		{"starts with a push", code(pushR12, pushRBP, ret), free, 0},
		{"starts with a jump", code(jmp(0), ret), one, 0},
		{"starts with a je", code(je(0), ret), one, 0},
		// Registers no probe reads may change before it.
		{"compare, mov, push", code(cmpbRIP, movRDIRBX, pushRBP, ret), one, 10},
		// jemalloc 5.3's malloc: the probe goes on its first branch.
		{"jemalloc malloc", code(cmpRDI, ja(4), leaRAX, ret, ret), one, 7},
		{"jemalloc free", jemallocFree, free, 38},
		{"jemalloc free, rdx an argument", jemallocFree, three, 0},
		{"jemalloc free, verify_pointers", jemallocFree, strictFree, 0},
		// A call is emulated too.
		{"compare then call", code(cmpbRIP, call(0), ret), one, 7},
		// libstdc++'s nothrow new: endbr64, sub $8,%rsp, call new. Only
		// an entry-only probe that knows how far the stack moved may
		// skip the sub (see stackDelta).
		{"stack moved", code(endbr64, subRSP, call(0), ret), one, 0},
		{"stack moved, entry only", code(endbr64, subRSP, call(0), ret), entryOnly, 8},
		{"header read", code(movHeader, pushRBP, ret), one, 4},
		{"header read, verify_pointers", code(movHeader, pushRBP, ret), strict, 0},
		{"global read, verify_pointers", code(movRIPRDX, pushRBP, ret), strict, 7},
		{"lea of the pointer, verify_pointers", code(leaRAX, pushRBP, ret), strict, 4},
		{"read through a lea of it", code(leaRAX, movRAXRCX, pushRBP, ret), strict, 0},
		{"read through a copy", code(movRDIRAX, movzblESI, pushRBP, ret), strict, 0},
		{"read through other registers", code(movRIPRDX, movzblESI, pushRBP, ret), strict, 11},
		{"copy overwritten", code(movRDIRAX, movEAX0, movRAXRCX, pushRBP, ret), strict, 11},
		{"copy's low byte overwritten", code(movRDIRAX, movAL0, movRAXRCX, pushRBP, ret), strict, 0},
		{"second argument written", code(movzblESI, pushRBP, ret), one, 4},
		{"second argument written, two arguments", code(movzblESI, pushRBP, ret), two, 0},
		{"first argument written", code(cmpbRIP, movRSIRDI, pushRBP, ret), one, 0},
		{"byte of the first argument written", code(movbDIL, pushRBP, ret), one, 0},
		{"frame pointer written", code(movRDIRBP, pushRBP, ret), one, 0},
		{"stack pointer written", code(subRSP, pushRBP, ret), one, 0},
		{"memory written", code(movRAXRIP, pushRBP, ret), one, 0},
		{"mul writes rdx:rax", code(movRDIRAX, mulRSI, pushRBP, ret), one, 0},
		// The kernel single-steps a branch with a data-size prefix.
		{"prefixed je", code(cmpbRIP, je16, pushRBP, ret, ret), one, 0},
		// Nothing the kernel emulates after the compare.
		{"compare then pop", code(cmpbRIP, popRBP, ret), one, 0},
		// A jump back to the probe point or before it would hit it twice.
		{"loop to the probe point", code(testRDI, je(4), pushRBP, jmp(-3), ret, ret), free, 0},
		{"jump into the skipped test", code(cmpbRIP, pushRBP, jmp(-4), ret), one, 0},
		{"call of the probe point", code(testRDI, je(7), pushRBP, call(-6), ret, ret), free, 0},
		{"jump to the je", code(cmpbRIP, je(2), jmp(-4), ret), one, 0},
		// A jump back to the entry itself is a new call: the probe sees it.
		{"jump to the entry", code(testRDI, je(4), pushRBP, jmp(-8), ret, ret), free, 5},
		// The null path leaving the function, or back to the entry: the
		// probe goes on the je, where null pointers pass it too.
		{"je out of the function", code(testRDI, je(100), pushRBP, ret), free, 3},
		{"je to the entry", code(testRDI, je(-5), pushRBP, ret), free, 3},
		// jemalloc's sized delete: past the null test, sub $8,%rsp.
		{"no point past the null test", code(testRDI, je(14), subRSP, call(0), subRSP, ret, ret), free, 3},
		{"prefixed null je", code(testRDI, je16, pushRBP, ret, ret), free, 0},
		{"undecodable bytes", code(testRDI, je(2), pushRBP, ret, ret, []byte{0x06}), free, 0},
		{"most instructions skipped", code(append(many, pushRBP, ret)...), one, 7 * maxSkipped},
		{"too many instructions", code(append(many, cmpbRIP, pushRBP, ret)...), one, 0},
		// glibc 2.36's memalign: "cmpb $0,initialized; je init; jmp
		// _mid_memalign". Both paths pass the je.
		{"memalign", code(cmpbRIP, je(7), jmp32(0x100), xchgAX, subRSP, jmp32(0x100)), two, 7},
		{"paths meet", code(cmpbRIP, je(1), pushRBP, subRSP, ret), two, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const off = 0x1000
			file := append(make([]byte, off), tc.code...)
			fs := funcSym{off: off, size: uint64(len(tc.code))}
			if got := int(probePoint(bytes.NewReader(file), fs, tc.use) - off); got != tc.want {
				t.Errorf("probePoint = entry+%d, want entry+%d", got, tc.want)
			}
		})
	}
	// A function that cannot be read keeps its entry.
	fs := funcSym{off: 0x1000, size: 16}
	if got := probePoint(bytes.NewReader(nil), fs, free); got != fs.off {
		t.Errorf("unreadable: probePoint = %#x, want %#x", got, fs.off)
	}
	if got := probePoint(bytes.NewReader(make([]byte, 0x1000)), funcSym{off: 0x10}, free); got != 0x10 {
		t.Errorf("no size: probePoint = %#x, want 0x10", got)
	}
}

// TestRegNum checks the general register each size of register belongs to.
func TestRegNum(t *testing.T) {
	for r, want := range map[x86asm.Reg]int{
		x86asm.AL: regRAX, x86asm.AH: regRAX, x86asm.BH: regRBX, x86asm.SPB: regRSP, x86asm.DIB: regRDI,
		x86asm.R8B: regR8, x86asm.R15B: 15, x86asm.DX: regRDX, x86asm.R9W: regR9, x86asm.ESI: regRSI,
		x86asm.R8L: regR8, x86asm.RBP: regRBP, x86asm.R15: 15, x86asm.RIP: -1, x86asm.FS: -1,
	} {
		if got := regNum(r); got != want {
			t.Errorf("regNum(%v) = %d, want %d", r, got, want)
		}
	}
}

// TestProbePointLibc checks where the probes of this machine's C library
// go: free's past its null test, onto a push, when free starts with one;
// every other on its entry or on an instruction the kernel emulates.
func TestProbePointLibc(t *testing.T) {
	lib := testLibc(t)
	f, err := os.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	free := checkPoints(t, lib)["free"]
	head := make([]byte, 7)
	if _, err := f.ReadAt(head, int64(free.off)); err != nil {
		t.Fatal(err)
	}
	// Built with -fcf-protection, free starts with endbr64.
	if !bytes.HasPrefix(bytes.TrimPrefix(head, endbr64), testRDI) {
		t.Skipf("%s's free does not start with test %%rdi,%%rdi (% x)", lib, head)
	}
	pt := probePoint(f, free, entryUse{args: 1, nullSkipped: true})
	if inst := instAt(t, f, pt); pt == free.off || inst.Op != x86asm.PUSH {
		t.Errorf("%s: free's probe at entry+%d is on %v, want a push past the entry", lib, pt-free.off, inst)
	}
}

// checkPoints checks that every probe mdtrace puts on the allocator in lib
// is on its entry or on an instruction the kernel emulates, and logs them.
// It returns the allocator's functions.
func checkPoints(t *testing.T, lib string) map[string]funcSym {
	t.Helper()
	offs, err := funcOffsets(lib)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ep := range entryPoints {
		fs, ok := offs[ep.symbol]
		if !ok {
			continue
		}
		pt := probePoint(f, fs, ep.use(false))
		inst := instAt(t, f, pt)
		if pt != fs.off && !emulated(inst) {
			t.Errorf("%s: %s's probe at entry+%d on %v", lib, ep.symbol, pt-fs.off, inst)
		}
		t.Logf("%s: entry+%d: %v", ep.symbol, pt-fs.off, inst)
	}
	return offs
}

// instAt decodes the instruction at offset off of f.
func instAt(t *testing.T, f io.ReaderAt, off uint64) x86asm.Inst {
	t.Helper()
	b := make([]byte, 16)
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
	inst, err := decode(b)
	if err != nil {
		t.Fatalf("decoding at %#x: %v", off, err)
	}
	return inst
}

// testLibc returns the file that gives the test programs malloc.
func testLibc(t *testing.T) string {
	t.Helper()
	lib, err := AllocatorOfFile(testProg(t, "pairs"), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	return lib.Path
}

// FuzzProbePoint: any bytes for a function's code give its entry, or a
// point on an instruction the kernel emulates past a prologue of harmless
// instructions (and free's null test) that no jump reaches, never a panic.
func FuzzProbePoint(f *testing.F) {
	f.Add(code(testRDI, je(4), pushRBP, popRBP, ret, nop, nop, ret), true, uint8(1))
	f.Add(code(endbr64, testRDI, je(2), pushRBP, ret, ret), true, uint8(1))
	f.Add(code(cmpbRIP, pushR12, ret), false, uint8(2))
	f.Add(code(testRDI, je(4), pushRBP, jmp(-3), ret, ret), true, uint8(1))
	f.Add(code(cmpbRIP, je(7), jmp32(0x100), xchgAX, subRSP, jmp32(0x100)), false, uint8(2))
	f.Add(jemallocFree, true, uint8(1))
	f.Fuzz(func(t *testing.T, fn []byte, nullSkipped bool, args uint8) {
		const off = 0x40
		use := entryUse{args: int(args % 7), nullSkipped: nullSkipped, noDeref: args&0x80 != 0, stackMoves: args&0x40 != 0}
		file := append(make([]byte, off), fn...)
		fs := funcSym{off: off, size: uint64(len(fn))}
		pt := probePoint(bytes.NewReader(file), fs, use)
		if pt == off {
			return
		}
		if pt < off || pt >= off+uint64(len(fn)) {
			t.Fatalf("probePoint = %#x, outside the function past its entry (%#x, %#x)", pt, off, off+len(fn))
		}
		at := int(pt - off)
		if inst, err := decode(fn[at:]); err != nil || !emulated(inst) {
			t.Fatalf("probePoint = entry+%d, on %v (%v)", at, inst, err)
		}
		// What was skipped changes nothing the probe reads, nor, with
		// noDeref, reads through it.
		tainted := uint32(0)
		for _, r := range argRegs[:min(use.args, len(argRegs))] {
			tainted |= 1 << r
		}
		for pc, tested := 0, false; pc < at; {
			inst, err := decode(fn[pc:])
			if err != nil {
				t.Fatalf("probePoint = entry+%d past undecodable bytes at %d", at, pc)
			}
			switch {
			case tested && inst.Op == x86asm.JE, harmless(inst, use.args), bytes.HasPrefix(fn[pc:], endbr64),
				use.stackMoves && stackSub(inst) > 0:
			default:
				t.Fatalf("probePoint = entry+%d past %v at %d", at, inst, pc)
			}
			if use.noDeref && derefs(inst, tainted) {
				t.Fatalf("probePoint = entry+%d past %v at %d, which reads through an argument", at, inst, pc)
			}
			tainted = taint(inst, tainted)
			tested = use.nullSkipped && inst.Op == x86asm.TEST && inst.Args[0] == x86asm.RDI && inst.Args[1] == x86asm.RDI
			pc += inst.Len
		}
		jumps, ok := branches(fn)
		if !ok {
			t.Fatalf("probePoint = entry+%d in code that does not decode", at)
		}
		for _, j := range jumps {
			if j.to > 0 && j.to <= at {
				t.Fatalf("probePoint = entry+%d, a jump from %d reaches %d", at, j.from, j.to)
			}
		}
	})
}

// liveSites returns the live blocks of a snapshot as "SIZE FUNCTION", the
// function of their first frame, sorted.
func liveSites(snap *leak.Snapshot, names map[uint64][]string) []string {
	var live []string
	for _, a := range snap.Allocs {
		fn := ""
		if n := names[a.StackID]; len(n) > 0 {
			fn = n[0]
		}
		live = append(live, fmt.Sprintf("%d %s", a.Size, fn))
	}
	slices.Sort(live)
	return live
}

// TestPlace: what Attach and --verbose learn of a probe point: the
// instruction there, whether the kernel single-steps it, how far the stack
// moved, whether the function only jumps to another.
func TestPlace(t *testing.T) {
	dir := t.TempDir()
	one, entryOnly := entryUse{args: 1}, entryUse{args: 1, stackMoves: true}
	for _, tc := range []struct {
		name string
		code []byte
		use  entryUse
		want placement // off from the entry
	}{
		{"push", code(cmpbRIP, pushRBP, ret), one, placement{off: 7, inst: "push"}},
		{"endbr64 kept", code(endbr64, subRSP, ret), one, placement{off: 0, inst: "endbr64", stepped: true}},
		{"mov kept", code(movRSIRDI, pushRBP, ret), one, placement{off: 0, inst: "mov", stepped: true}},
		{"je", code(cmpbRIP, je(1), ret, ret), one, placement{off: 7, inst: "je"}},
		{"past a sub", code(endbr64, subRSP, call(0), ret), entryOnly, placement{off: 8, inst: "call", delta: 0x18}},
		{"thunk", code(endbr64, jmp32(-0x1000), nop), one, placement{off: 4, inst: "jmp", thunk: true}},
		{"short thunk", code(jmp(-0x10), nop), one, placement{off: 0, inst: "jmp", thunk: true}},
		{"no thunk", code(endbr64, pushRBP, jmp(0), ret), one, placement{off: 4, inst: "push"}},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		if err := os.WriteFile(path, append(make([]byte, 0x40), tc.code...), 0o644); err != nil {
			t.Fatal(err)
		}
		fs := funcSym{off: 0x40, size: uint64(len(tc.code))}
		got := entryPlacement(path, fs, tc.use)
		got.off -= fs.off
		if got != tc.want {
			t.Errorf("%s: placement %+v, want %+v", tc.name, got, tc.want)
		}
	}
	missing := entryPlacement(filepath.Join(dir, "missing"), funcSym{off: 0x40, size: 16}, one)
	if want := (placement{off: 0x40, inst: "?", stepped: true}); missing != want {
		t.Errorf("missing file: %+v, want %+v", missing, want)
	}
}

// TestThunkTarget finds where the thunks among C++'s operators jump: to
// another function of the file (jemalloc's new[] to its new) or through the
// PLT (jemalloc's delete[] to free, libstdc++'s new[] to its new).
func TestThunkTarget(t *testing.T) {
	for _, tc := range []struct {
		lib  string
		want map[string]string
	}{
		{"libstdc++.so.6", map[string]string{"_Znam": "_Znwm", "_ZdlPv": "free", "_ZdaPvm": "_ZdaPv"}},
		{"libjemalloc.so.2", map[string]string{"_Znam": "_Znwm", "_ZdaPv": "free", "_ZdlPvSt11align_val_t": "free"}},
	} {
		path := canonical("/usr/lib/x86_64-linux-gnu/" + tc.lib)
		offs, err := funcOffsets(path)
		if err != nil {
			t.Logf("%s: %v (not installed)", tc.lib, err)
			continue
		}
		for sym, want := range tc.want {
			pl := entryPlacement(path, offs[sym], entryUse{args: 1})
			if !pl.thunk || pl.target != want {
				t.Errorf("%s: %s: thunk %v to %q, want a thunk to %q", tc.lib, sym, pl.thunk, pl.target, want)
			}
		}
		// A function that is no thunk has no target.
		if pl := entryPlacement(path, offs["_Znwm"], entryUse{args: 1}); pl.thunk || pl.target != "" {
			t.Errorf("%s: operator new: thunk %v to %q", tc.lib, pl.thunk, pl.target)
		}
	}
	if _, ok := stubTarget(bytes.NewReader(nil), "/nonexistent", 0x1000); ok {
		t.Error("a stub in a missing file")
	}
}

// TestStackDelta: how far the stack pointer moved before a probe point.
func TestStackDelta(t *testing.T) {
	c := code(endbr64, subRSP, testRDI, subRSP, pushRBP)
	for at, want := range map[int]int{0: 0, 4: 0, 8: 0x18, 11: 0x18, 15: 0x30} {
		if got := stackDelta(c, at); got != want {
			t.Errorf("stackDelta at %d = %#x, want %#x", at, got, want)
		}
	}
}

// TestCallerPages: free's probe with verify carries the pages its
// executable segment reaches below and above it, from the file's program
// headers.
func TestCallerPages(t *testing.T) {
	cases := []struct {
		pl   placement
		want uint64
	}{
		{placement{off: 0x1000, segStart: 0x1000, segEnd: 0x3000}, 0 | 2<<16},
		{placement{off: 0x1800, segStart: 0x1000, segEnd: 0x3000}, 1 | 2<<16},
		{placement{off: 0x2fff, segStart: 0x1000, segEnd: 0x3000}, 2 | 1<<16},
		{placement{off: 0x3000, segStart: 0x1000, segEnd: 0x3000}, 0},         // outside
		{placement{off: 0x800, segStart: 0x1000, segEnd: 0x3000}, 0},          // outside
		{placement{off: 0x1000}, 0},                                           // not looked up
		{placement{off: 0x1000, segStart: 0x1000, segEnd: 0x1000 + 1<<28}, 0}, // too far
	}
	for _, c := range cases {
		if got := callerPages(c.pl); got != c.want {
			t.Errorf("callerPages(%+v) = %#x, want %#x", c.pl, got, c.want)
		}
	}
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		t.Skipf("no glibc to read: %v", err)
	}
	defer f.Close()
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	fh, err := os.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	free, err := FuncOffset(libc, "free")
	if err != nil {
		t.Fatal(err)
	}
	start, end := execSegment(fh, free)
	if text == nil || start != text.Off || end != text.Off+text.Filesz {
		t.Errorf("execSegment(libc, free) = %#x-%#x, want its text segment %+v", start, end, text)
	}
	if start, end := execSegment(fh, 0); start != 0 || end != 0 {
		t.Errorf("execSegment(libc, 0) = %#x-%#x: offset 0 is not in the text", start, end)
	}
}
