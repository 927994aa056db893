//go:build linux

package tracer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mdtrace/mdtrace/internal/fixture"
	"github.com/mdtrace/mdtrace/stacks"
)

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
		fixture.ReplaceFile(t, path, append(make([]byte, off), b...), 0o644)
	}
	free := code(testRDI, je(2), pushRBP, ret, ret)
	fs := funcSym{off: off, size: uint64(len(free))}
	use := entryUse{args: 1, nullSkipped: true}
	write(free)
	if got := entryPlacement(path, fs, use).off; got != off+5 {
		t.Fatalf("entryPlacement = %#x, want entry+5", got)
	}
	// The answer is remembered for the file as it is.
	id, _ := statID(path)
	got, ok := pointCache.get(pointKey{id, off, use})
	if !ok || got.off != off+5 {
		t.Errorf("remembered: %+v, %v", got, ok)
	}
	// Replaced by a function the probe must stay on the entry of.
	write(code(movRSIRDI, pushRBP, ret, ret))
	if got := entryPlacement(path, fs, use).off; got != off {
		t.Errorf("after the file changed: entryPlacement = %#x, want the entry", got)
	}
	if got := entryPlacement(dir+"/missing", fs, use).off; got != off {
		t.Errorf("no file: entryPlacement = %#x, want the entry", got)
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
		fixture.ReplaceFile(t, exe, data, 0o755)
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

// TestAlignedAllocFirst: an aligned_alloc before malloc is initialized
// takes memalign's other path (glibc 2.36), past the je its probe is on.
func TestAlignedAllocFirst(t *testing.T) {
	needProbes(t)
	snap, names, c, st := exitSnapshot(t, ProbeConfig{StackDepth: 16}, testProg(t, "firstalign"))
	if !st.Known || st.Code != 0 {
		t.Errorf("exit status = %+v, want code 0", st)
	}
	if got, want := liveSites(snap, names), []string{"1234 first_aligned_alloc"}; !slices.Equal(got, want) {
		t.Errorf("live at exit: %q, want %q", got, want)
	}
	if c.UnknownFrees != 0 {
		t.Errorf("unknown frees: %d", c.UnknownFrees)
	}
}

// TestOtherAllocators traces malloc/free pairs and C++'s operators with
// jemalloc and tcmalloc preloaded: their malloc and free start with
// register moves and loads, and their probes go on their first branches;
// they define operator new and delete, which need not call malloc and free.
// Every block is counted once, and a block from new has the caller of new
// as its first frame.
func TestOtherAllocators(t *testing.T) {
	needProbes(t)
	for _, tc := range []struct {
		lib      string
		ownFrees uint64   // blocks the allocator frees itself
		own      []string // blocks the allocator leaves live itself (from new: unseen without its operators)
		// Whether free's probe moves with verify_pointers: jemalloc's
		// free reads its radix tree at an address from the pointer
		// before it branches.
		verifyMoves bool
	}{
		{"", 0, nil, false},
		{"libjemalloc.so.2", 0, nil, false},
		{"libtcmalloc_minimal.so.4", 2, []string{"16 _ZN13TCMallocGuardC1Ev", "8 _ZN15MallocExtension8RegisterEPS_"}, true},
	} {
		name := tc.lib
		if name == "" {
			name = "glibc"
		}
		t.Run(name, func(t *testing.T) {
			env := os.Environ()
			if tc.lib != "" {
				path := "/usr/lib/x86_64-linux-gnu/" + tc.lib
				if _, err := os.Stat(path); err != nil {
					t.Skipf("%s is not installed (make deps installs it): %v", tc.lib, err)
				}
				offs := checkPoints(t, canonical(path))
				for _, sym := range []string{"malloc", "free"} {
					ep := entryPoints[slices.IndexFunc(entryPoints, func(ep entryPoint) bool { return ep.symbol == sym })]
					if pt := entryPlacement(canonical(path), offs[sym], ep.use(false)).off; pt == offs[sym].off {
						t.Errorf("%s's probe stays on its entry", sym)
					}
				}
				free := entryPoints[slices.IndexFunc(entryPoints, func(ep entryPoint) bool { return ep.symbol == "free" })]
				if pt := entryPlacement(canonical(path), offs["free"], free.use(true)).off; (pt != offs["free"].off) != tc.verifyMoves {
					t.Errorf("with verify_pointers, free's probe at entry+%d (moved: want %v)", pt-offs["free"].off, tc.verifyMoves)
				}
				env = append(env, "LD_PRELOAD="+path)
			}
			snap, names, c, st := exitSnapshotEnv(t, ProbeConfig{StackDepth: 16}, env, testProg(t, "pairs"), "5000")
			if !st.Known || st.Code != 0 {
				t.Errorf("pairs: exit status = %+v, want code 0", st)
			}
			// stdout's buffer stays live; with a C++ allocator,
			// libstdc++'s exception pool, from its constructor.
			want := []string{"4096 _IO_file_doallocate"}
			if tc.lib != "" {
				want = append(want, "72704 ")
			}
			want = append(want, tc.own...)
			slices.Sort(want)
			if got := liveSites(snap, names); !slices.Equal(got, want) {
				t.Errorf("pairs: live at exit: %q, want %q", got, want)
			}
			// 65 warm-up pairs and 5000 timed ones.
			frees := 5065 + tc.ownFrees
			if c.Frees != frees || c.Allocs != c.Frees+uint64(len(want)) || c.UnknownFrees != 0 || c.MissedReturn != 0 || c.Nested != 0 {
				t.Errorf("pairs: counters %+v, want %d frees, %d more allocations, no unknown frees", c, frees, len(want))
			}

			snap, names, c, st = exitSnapshotEnv(t, ProbeConfig{StackDepth: 16}, env, testProg(t, "cppleak"))
			if !st.Known || st.Code != 0 {
				t.Errorf("cppleak: exit status = %+v, want code 0", st)
			}
			// glibc's libstdc++ calls malloc from operator new, which
			// keeps no frame pointer: its caller is not in the stack.
			fresh, spare := "555 _ZN3geo5ArenaIcE5freshEm", "333 _ZN3geo5ArenaIcE5spareEm"
			if tc.lib == "" {
				fresh, spare = "555 _Znwm", "333 _Znwm"
			}
			want = append([]string{"72704 ", "777 _ZN3geo5ArenaIcE3rawEm", fresh, spare}, tc.own...)
			slices.Sort(want)
			if got := liveSites(snap, names); !slices.Equal(got, want) {
				t.Errorf("cppleak: live at exit:\n got %q\nwant %q", got, want)
			}
			// 800 blocks from new, freed with delete, each counted once
			// (a free inside a delete is nested); the allocator's own.
			frees = 800 + tc.ownFrees
			if c.Frees != frees || c.Allocs != c.Frees+uint64(len(want)) || c.UnknownFrees != 0 || c.MissedReturn != 0 {
				t.Errorf("cppleak: counters %+v, want %d frees, %d more allocations, no unknown frees", c, frees, len(want))
			}
			t.Logf("cppleak: calls inside others: %d", c.Nested)
		})
	}
}

// TestAttachOncePerFile: a file named again by another path (a symbolic
// link, as the loader's /lib/... is to the maps' /usr/lib/...) is not
// probed twice for a process, which would count every call twice.
func TestAttachOncePerFile(t *testing.T) {
	needProbes(t)
	probes, err := LoadProbes(ProbeConfig{StackDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer probes.Close()
	alias := filepath.Join(t.TempDir(), "libc-alias.so")
	var links [2]int
	var c Counters
	proc, err := Launch([]string{testProg(t, "pairs"), "5000"}, nil, nil, Hooks{
		Ready: func(pid int) error {
			lib, err := AllocatorOfExec(pid)
			if err != nil {
				return err
			}
			if err := os.Symlink(lib.Path, alias); err != nil {
				return err
			}
			for i, path := range []string{lib.Path, alias} {
				if err := probes.Attach(pid, stacks.LocalFile(path)); err != nil {
					return err
				}
				probes.mu.Lock()
				links[i] = len(probes.links[pid])
				probes.mu.Unlock()
			}
			return nil
		},
		Exit: func(pid int) { c, _ = probes.Counters() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := proc.Wait(); err != nil || !st.Known || st.Code != 0 {
		t.Fatalf("exit status %+v, %v", st, err)
	}
	if links[0] == 0 || links[1] != links[0] {
		t.Errorf("links after the first attach %d, after the second %d: want the same, not 0", links[0], links[1])
	}
	if c.Frees != 5065 || c.UnknownFrees != 0 {
		t.Errorf("frees %d (want 5065), unknown frees %d (want 0)", c.Frees, c.UnknownFrees)
	}
}

// TestIsCxxRuntime: a C++ runtime by its name, and only if it defines
// operator new.
func TestIsCxxRuntime(t *testing.T) {
	dir := t.TempDir()
	noNew := filepath.Join(dir, "libc++.so.1")
	data, err := os.ReadFile(testProg(t, "pairs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(noNew, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if IsCxxRuntime(stacks.LocalFile(noNew)) {
		t.Errorf("%s, without operator new, is a runtime", noNew)
	}
	stdcxx := canonical("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
	if _, err := os.Stat(stdcxx); err == nil && !IsCxxRuntime(stacks.LocalFile(stdcxx)) {
		t.Errorf("%s is not a runtime", stdcxx)
	}
	if IsCxxRuntime(stacks.LocalFile(testLibc(t))) {
		t.Error("libc is a runtime")
	}
}
