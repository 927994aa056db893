//go:build linux

package tracer

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"golang.org/x/arch/x86/x86asm"
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
)

func je(rel int8) []byte  { return []byte{0x74, byte(rel)} }
func jne(rel int8) []byte { return []byte{0x75, byte(rel)} }
func jmp(rel int8) []byte { return []byte{0xeb, byte(rel)} }

// call rel32
func call(rel int32) []byte {
	return []byte{0xe8, byte(rel), byte(rel >> 8), byte(rel >> 16), byte(rel >> 24)}
}

func code(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestProbePoint(t *testing.T) {
	for _, tc := range []struct {
		name        string
		code        []byte
		nullSkipped bool
		want        int
	}{
		// glibc 2.36's free: the probe goes on the push, past the null test.
		{"free", code(testRDI, je(4), pushRBP, popRBP, ret, nop, nop, ret), true, 5},
		{"free with endbr64", code(endbr64, testRDI, je(2), pushRBP, ret, ret), true, 9},
		// A function whose probe sees a null pointer keeps its entry.
		{"null test, null not skipped", code(testRDI, je(2), pushRBP, ret, ret), false, 0},
		{"null path falls through", code(testRDI, jne(2), pushRBP, ret, ret), true, 0},
		{"other register tested", code(testRSI, je(2), pushRBP, ret, ret), true, 0},
		// glibc's posix_memalign and valloc: a compare, then a push.
		{"compare then push", code(cmpbRIP, pushR12, ret), false, 7},
		// Already emulated: nothing to gain.
		{"starts with a push", code(pushR12, pushRBP, ret), true, 0},
		// Nothing the kernel emulates after the compare.
		{"compare then mov", code(cmpbRIP, movRDIRBX, pushRBP, ret), false, 0},
		// A jump back to the probe point or before it would hit it twice.
		{"loop to the probe point", code(testRDI, je(4), pushRBP, jmp(-3), ret, ret), true, 0},
		{"jump into the skipped test", code(cmpbRIP, pushRBP, jmp(-4), ret), false, 0},
		{"call of the probe point", code(testRDI, je(7), pushRBP, call(-6), ret, ret), true, 0},
		// A jump back to the entry itself is a new call: the probe sees it.
		{"jump to the entry", code(testRDI, je(4), pushRBP, jmp(-8), ret, ret), true, 5},
		// The null path leaving the function: what it runs is not known.
		{"je out of the function", code(testRDI, je(100), pushRBP, ret), true, 0},
		{"je backwards", code(testRDI, je(-5), pushRBP, ret), true, 0},
		{"undecodable bytes", code(testRDI, je(2), pushRBP, ret, ret, []byte{0x06}), true, 0},
		{"too many compares", code(cmpbRIP, cmpbRIP, cmpbRIP, cmpbRIP, cmpbRIP, pushRBP, ret), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const off = 0x1000
			file := append(make([]byte, off), tc.code...)
			fs := funcSym{off: off, size: uint64(len(tc.code))}
			if got := probePoint(bytes.NewReader(file), fs, tc.nullSkipped); got != off+uint64(tc.want) {
				t.Errorf("probePoint = entry+%d, want entry+%d", got-off, tc.want)
			}
		})
	}
	// A function that cannot be read keeps its entry.
	fs := funcSym{off: 0x1000, size: 16}
	if got := probePoint(bytes.NewReader(nil), fs, true); got != fs.off {
		t.Errorf("unreadable: probePoint = %#x, want %#x", got, fs.off)
	}
	if got := probePoint(bytes.NewReader(make([]byte, 0x1000)), funcSym{off: 0x10}, true); got != 0x10 {
		t.Errorf("no size: probePoint = %#x, want 0x10", got)
	}
}

// TestProbePointLibc checks where the probes of this machine's C library
// go: free's past its null test, onto a push, when free starts with one.
func TestProbePointLibc(t *testing.T) {
	lib := testLibc(t)
	offs, err := funcOffsets(lib)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	free := offs["free"]
	head := make([]byte, 3)
	if _, err := f.ReadAt(head, int64(free.off)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(head, testRDI) {
		t.Skipf("%s's free does not start with test %%rdi,%%rdi (% x)", lib, head)
	}
	at := probePoint(f, free, true)
	if at == free.off {
		t.Fatalf("%s: free's probe stays on its entry", lib)
	}
	insn := make([]byte, 16)
	if _, err := f.ReadAt(insn, int64(at)); err != nil {
		t.Fatal(err)
	}
	inst, err := x86asm.Decode(insn, 64)
	if err != nil || inst.Op != x86asm.PUSH {
		t.Errorf("%s: free's probe at entry+%d is on %v (%v), want a push", lib, at-free.off, inst, err)
	}
	// malloc_usable_size counts null pointers: it keeps its entry.
	if mus, ok := offs["malloc_usable_size"]; ok {
		if got := probePoint(f, mus, false); got != mus.off {
			if _, err := f.ReadAt(insn, int64(got)); err == nil && bytes.HasPrefix(insn, testRDI) {
				t.Errorf("malloc_usable_size's probe moved past a null test to entry+%d", got-mus.off)
			}
		}
	}
}

// testLibc returns the file that gives the test programs malloc.
func testLibc(t *testing.T) string {
	t.Helper()
	lib, err := AllocatorOfFile(testProg(t, "pairs"), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// TestFreeProbeCountsOnce runs malloc/free pairs with free probed past its
// null test: every block is freed once, none is unknown.
func TestFreeProbeCountsOnce(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "pairs")
	snap, _, c, st := exitSnapshot(t, ProbeConfig{StackDepth: 16}, prog, "5000")
	if !st.Known || st.Code != 0 {
		t.Errorf("exit status = %+v, want code 0", st)
	}
	// 65 warm-up pairs and 5000 timed ones; stdio's buffer stays live.
	if c.Frees != 5065 || c.UnknownFrees != 0 || c.Allocs != c.Frees+uint64(len(snap.Allocs)) || len(snap.Allocs) != 1 {
		t.Errorf("allocs %d, frees %d (want 5065), unknown frees %d (want 0), live %d (want 1)",
			c.Allocs, c.Frees, c.UnknownFrees, len(snap.Allocs))
	}
}

// TestFuncCaches checks that the functions and probe points of a file are
// read once, and again once the file has changed.
func TestFuncCaches(t *testing.T) {
	const off = 0x1000
	dir := t.TempDir()
	path := dir + "/lib.so"
	write := func(b []byte) {
		t.Helper()
		// A new file renamed over the old one, as installers do.
		tmp := dir + "/new"
		if err := os.WriteFile(tmp, append(make([]byte, off), b...), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	free := code(testRDI, je(2), pushRBP, ret, ret)
	fs := funcSym{off: off, size: uint64(len(free))}
	write(free)
	if got := entryProbe(path, fs, true); got != off+5 {
		t.Fatalf("entryProbe = entry+%d, want entry+5", got-off)
	}
	// The answer is remembered for the file as it is.
	id, _ := statID(path)
	got, ok := pointCache.get(pointKey{id, off, true})
	if !ok || got != off+5 {
		t.Errorf("remembered: %#x, %v", got, ok)
	}
	// Replaced by a function the probe must stay on the entry of.
	write(code(testRDI, je(2), movRDIRBX, ret, ret))
	if got := entryProbe(path, fs, true); got != off {
		t.Errorf("after the file changed: entryProbe = entry+%d, want the entry", got-off)
	}
	if got := entryProbe(dir+"/missing", fs, true); got != off {
		t.Errorf("no file: entryProbe = %#x, want the entry", got)
	}

	// funcOffsets: one read per file as it is.
	lib := testLibc(t)
	a, err := funcOffsets(lib)
	if err != nil {
		t.Fatal(err)
	}
	b, err := funcOffsets(lib)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%p", a) != fmt.Sprintf("%p", b) {
		t.Error("funcOffsets read the same file twice")
	}
	exe := dir + "/prog"
	for _, prog := range []string{"pairs", "leaky"} {
		data, err := os.ReadFile(testProg(t, prog))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/new", data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir+"/new", exe); err != nil {
			t.Fatal(err)
		}
		offs, err := funcOffsets(exe)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := offs["leak_malloc"]; ok != (prog == "leaky") {
			t.Errorf("%s copied to %s: leak_malloc found = %v", prog, exe, ok)
		}
	}
	if _, err := funcOffsets(dir + "/lib.so"); err == nil {
		t.Error("funcOffsets of a file that is not ELF: no error")
	}
}

// FuzzProbePoint: any bytes for a function's code give its entry or the
// offset of a push past a prologue of flag-only instructions, never a
// panic.
func FuzzProbePoint(f *testing.F) {
	f.Add(code(testRDI, je(4), pushRBP, popRBP, ret, nop, nop, ret), true)
	f.Add(code(endbr64, testRDI, je(2), pushRBP, ret, ret), true)
	f.Add(code(cmpbRIP, pushR12, ret), false)
	f.Add(code(testRDI, je(4), pushRBP, jmp(-3), ret, ret), true)
	f.Fuzz(func(t *testing.T, fn []byte, nullSkipped bool) {
		const off = 0x40
		file := append(make([]byte, off), fn...)
		fs := funcSym{off: off, size: uint64(len(fn))}
		got := probePoint(bytes.NewReader(file), fs, nullSkipped)
		if got == off {
			return
		}
		if got < off || got >= off+uint64(len(fn)) {
			t.Fatalf("probePoint = %#x, outside the function [%#x, %#x)", got, off, off+len(fn))
		}
		inst, err := decode(fn[got-off:])
		if err != nil || inst.Op != x86asm.PUSH {
			t.Fatalf("probePoint = entry+%d, on %v (%v), not a push", got-off, inst, err)
		}
		if jumpsInto(fn, int(got-off)) {
			t.Fatalf("probePoint = entry+%d, which a jump reaches", got-off)
		}
	})
}
