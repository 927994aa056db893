//go:build linux

package tracer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
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
	xchgAX    = []byte{0x66, 0x90}             // xchg %ax,%ax: a 2-byte NOP
	subRSP    = []byte{0x48, 0x83, 0xec, 0x18} // sub $0x18,%rsp
)

func je(rel int8) []byte { return []byte{0x74, byte(rel)} }

// jmp rel32
func jmp32(rel int32) []byte {
	return []byte{0xe9, byte(rel), byte(rel >> 8), byte(rel >> 16), byte(rel >> 24)}
}
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
		want        []int // offsets from the entry
	}{
		// glibc 2.36's free: the probe goes on the push, past the null test.
		{"free", code(testRDI, je(4), pushRBP, popRBP, ret, nop, nop, ret), true, []int{5}},
		{"free with endbr64", code(endbr64, testRDI, je(2), pushRBP, ret, ret), true, []int{9}},
		// A function whose probe sees a null pointer keeps its entry.
		{"null test, null not skipped", code(testRDI, je(2), pushRBP, ret, ret), false, []int{0}},
		{"null path falls through", code(testRDI, jne(2), pushRBP, ret, ret), true, []int{0}},
		{"other register tested", code(testRSI, je(2), pushRBP, ret, ret), true, []int{0}},
		// glibc's posix_memalign and valloc: a compare, then a push.
		{"compare then push", code(cmpbRIP, pushR12, ret), false, []int{7}},
		// Already emulated: nothing to gain.
		{"starts with a push", code(pushR12, pushRBP, ret), true, []int{0}},
		// Nothing the kernel emulates after the compare.
		{"compare then mov", code(cmpbRIP, movRDIRBX, pushRBP, ret), false, []int{0}},
		// A jump back to the probe point or before it would hit it twice.
		{"loop to the probe point", code(testRDI, je(4), pushRBP, jmp(-3), ret, ret), true, []int{0}},
		{"jump into the skipped test", code(cmpbRIP, pushRBP, jmp(-4), ret), false, []int{0}},
		{"call of the probe point", code(testRDI, je(7), pushRBP, call(-6), ret, ret), true, []int{0}},
		// A jump back to the entry itself is a new call: the probe sees it.
		{"jump to the entry", code(testRDI, je(4), pushRBP, jmp(-8), ret, ret), true, []int{5}},
		// The null path leaving the function: what it runs is not known.
		{"je out of the function", code(testRDI, je(100), pushRBP, ret), true, []int{0}},
		{"je backwards", code(testRDI, je(-5), pushRBP, ret), true, []int{0}},
		{"undecodable bytes", code(testRDI, je(2), pushRBP, ret, ret, []byte{0x06}), true, []int{0}},
		{"too many compares", code(cmpbRIP, cmpbRIP, cmpbRIP, cmpbRIP, cmpbRIP, pushRBP, ret), false, []int{0}},
		// glibc 2.36's memalign: the jump of the initialized path, and
		// the first instruction of the other, which it never reaches.
		{"memalign", code(cmpbRIP, je(7), jmp32(0x100), xchgAX, subRSP, jmp32(0x100)), false, []int{9, 16}},
		{"short jump", code(cmpbRIP, je(2), jmp(0x10), subRSP, ret), false, []int{9, 11}},
		{"compare then jump", code(cmpbRIP, jmp(0x10), ret), false, []int{7}},
		// The branch's path must not run into the other one, nor be
		// reached from elsewhere.
		{"paths meet", code(cmpbRIP, je(1), pushRBP, subRSP, ret), false, []int{0}},
		{"other path reached again", code(cmpbRIP, je(7), jmp32(0x100), xchgAX, subRSP, jmp(-6), ret), false, []int{0}},
		{"two branches", code(cmpbRIP, je(9), cmpbRIP, je(2), jmp(0), subRSP, ret), false, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const off = 0x1000
			file := append(make([]byte, off), tc.code...)
			fs := funcSym{off: off, size: uint64(len(tc.code))}
			var got []int
			for _, o := range probePoints(bytes.NewReader(file), fs, tc.nullSkipped) {
				got = append(got, int(o-off))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("probePoints = entry+%d, want entry+%d", got, tc.want)
			}
		})
	}
	// A function that cannot be read keeps its entry.
	fs := funcSym{off: 0x1000, size: 16}
	if got := probePoints(bytes.NewReader(nil), fs, true); !slices.Equal(got, []uint64{fs.off}) {
		t.Errorf("unreadable: probePoints = %#x, want %#x", got, fs.off)
	}
	if got := probePoints(bytes.NewReader(make([]byte, 0x1000)), funcSym{off: 0x10}, true); !slices.Equal(got, []uint64{0x10}) {
		t.Errorf("no size: probePoints = %#x, want 0x10", got)
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
	head := make([]byte, 7)
	if _, err := f.ReadAt(head, int64(free.off)); err != nil {
		t.Fatal(err)
	}
	// Built with -fcf-protection, free starts with endbr64.
	if !bytes.HasPrefix(bytes.TrimPrefix(head, endbr64), testRDI) {
		t.Skipf("%s's free does not start with test %%rdi,%%rdi (% x)", lib, head)
	}
	pts := probePoints(f, free, true)
	if len(pts) != 1 || pts[0] == free.off {
		t.Fatalf("%s: free's probes at %#x, want one past the entry %#x", lib, pts, free.off)
	}
	if inst := instAt(t, f, pts[0]); inst.Op != x86asm.PUSH {
		t.Errorf("%s: free's probe at entry+%d is on %v, want a push", lib, pts[0]-free.off, inst)
	}
	// Every probe of the allocator is on its entry or on an instruction
	// the kernel emulates, but for the second path of a split.
	for _, ep := range entryPoints {
		fs, ok := offs[ep.symbol]
		if !ok {
			continue
		}
		pts := probePoints(f, fs, ep.call == callFree)
		var on []string
		for i, pt := range pts {
			inst := instAt(t, f, pt)
			on = append(on, fmt.Sprintf("entry+%d: %v", pt-fs.off, inst))
			if i == 0 && pt != fs.off && inst.Op != x86asm.PUSH && inst.Op != x86asm.JMP {
				t.Errorf("%s: probe at entry+%d on %v", ep.symbol, pt-fs.off, inst)
			}
		}
		t.Logf("%s: %s", ep.symbol, strings.Join(on, "; "))
		// glibc 2.36's memalign: cmpb (malloc initialized?), je, jmp.
		if ep.symbol == "memalign" {
			b := make([]byte, 32)
			if _, err := f.ReadAt(b, int64(fs.off)); err != nil {
				t.Fatal(err)
			}
			i1, _ := decode(b)
			i2, _ := decode(b[i1.Len:])
			i3, _ := decode(b[i1.Len+i2.Len:])
			if i1.Op == x86asm.CMP && i2.Op == x86asm.JE && i3.Op == x86asm.JMP && len(pts) != 2 {
				t.Errorf("memalign (%v; %v; %v): probes %s, want the jump and the je's target", i1, i2, i3, on)
			}
		}
		// malloc_usable_size counts null pointers: it keeps its entry.
		if ep.call == callUsableSize && !slices.Equal(pts, []uint64{fs.off}) {
			t.Errorf("malloc_usable_size's probes moved to %#x", pts)
		}
	}
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
	if got := entryProbes(path, fs, true); !slices.Equal(got, []uint64{off + 5}) {
		t.Fatalf("entryProbes = %#x, want entry+5", got)
	}
	// The answer is remembered for the file as it is.
	id, _ := statID(path)
	got, ok := pointCache.get(pointKey{id, off, true})
	if !ok || !slices.Equal(got, []uint64{off + 5}) {
		t.Errorf("remembered: %#x, %v", got, ok)
	}
	// Replaced by a function the probe must stay on the entry of.
	write(code(testRDI, je(2), movRDIRBX, ret, ret))
	if got := entryProbes(path, fs, true); !slices.Equal(got, []uint64{off}) {
		t.Errorf("after the file changed: entryProbes = %#x, want the entry", got)
	}
	if got := entryProbes(dir+"/missing", fs, true); !slices.Equal(got, []uint64{off}) {
		t.Errorf("no file: entryProbes = %#x, want the entry", got)
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

// FuzzProbePoint: any bytes for a function's code give its entry, or
// points past a prologue of flag-only instructions that no jump reaches
// but the prologue's own, never a panic.
func FuzzProbePoint(f *testing.F) {
	f.Add(code(testRDI, je(4), pushRBP, popRBP, ret, nop, nop, ret), true)
	f.Add(code(endbr64, testRDI, je(2), pushRBP, ret, ret), true)
	f.Add(code(cmpbRIP, pushR12, ret), false)
	f.Add(code(testRDI, je(4), pushRBP, jmp(-3), ret, ret), true)
	f.Add(code(cmpbRIP, je(7), jmp32(0x100), xchgAX, subRSP, jmp32(0x100)), false)
	f.Fuzz(func(t *testing.T, fn []byte, nullSkipped bool) {
		const off = 0x40
		file := append(make([]byte, off), fn...)
		fs := funcSym{off: off, size: uint64(len(fn))}
		pts := probePoints(bytes.NewReader(file), fs, nullSkipped)
		if slices.Equal(pts, []uint64{off}) {
			return
		}
		if len(pts) == 0 || len(pts) > 2 {
			t.Fatalf("probePoints = %#x", pts)
		}
		for _, pt := range pts {
			if pt <= off || pt >= off+uint64(len(fn)) {
				t.Fatalf("probePoints = %#x, outside the function past its entry (%#x, %#x)", pts, off, off+len(fn))
			}
		}
		first := int(pts[0] - off)
		inst, err := decode(fn[first:])
		if err != nil || inst.Op != x86asm.PUSH && inst.Op != x86asm.JMP || len(pts) == 2 && inst.Op != x86asm.JMP {
			t.Fatalf("probePoints = %#x, the first on %v (%v)", pts, inst, err)
		}
		jumps, ok := branches(fn)
		if !ok {
			t.Fatalf("probePoints = %#x in code that does not decode", pts)
		}
		reached := 0
		for _, j := range jumps {
			if j.to > 0 && j.to <= first {
				t.Fatalf("probePoints = %#x, a jump from %d reaches %d", pts, j.from, j.to)
			}
			if len(pts) == 2 && j.to == int(pts[1]-off) {
				reached++
			}
		}
		if len(pts) == 2 && reached != 1 {
			t.Fatalf("probePoints = %#x, the second reached by %d jumps", pts, reached)
		}
	})
}

// TestSplitProbes: an aligned_alloc before malloc is initialized takes
// memalign's other path, which has its own probe.
func TestSplitProbes(t *testing.T) {
	needProbes(t)
	snap, names, c, st := exitSnapshot(t, ProbeConfig{StackDepth: 16}, testProg(t, "firstalign"))
	if !st.Known || st.Code != 0 {
		t.Errorf("exit status = %+v, want code 0", st)
	}
	var got []string
	for _, a := range snap.Allocs {
		fn := ""
		if n := names[a.StackID]; len(n) > 0 {
			fn = n[0]
		}
		got = append(got, fmt.Sprintf("%d %s", a.Size, fn))
	}
	if want := []string{"1234 first_aligned_alloc"}; !slices.Equal(got, want) {
		t.Errorf("live at exit: %q, want %q", got, want)
	}
	if c.UnknownFrees != 0 {
		t.Errorf("unknown frees: %d", c.UnknownFrees)
	}
}
