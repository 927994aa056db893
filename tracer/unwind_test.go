//go:build linux

package tracer

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/unwind"
)

// TestPackRule: rules as bpf/unwind.h reads them; what an entry cannot
// hold is a stop.
func TestPackRule(t *testing.T) {
	for _, tc := range []struct {
		r    unwind.Rule
		want uint32
	}{
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 8, RA: -8}, 8 << 6},
		{unwind.Rule{Base: unwind.BaseRBP, Offset: 16, RBP: -16, RA: -8}, 1 | 16<<6 | 2<<22},
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 8, RA: -8, Stop: unwind.StopEnd}, 8<<6 | 1<<3},
		{unwind.Rule{Base: unwind.BasePLT, Offset: 11, RA: -8}, 2 | 11<<6},
		{unwind.Rule{Base: unwind.BaseSignal, RA: 168, Offset: 160, RBP: 120, Signal: true}, 4},
		{unwind.Rule{Base: unwind.BaseNone, Stop: unwind.StopNoFDE}, 3 | 2<<3},
		{unwind.Rule{Base: unwind.BaseNone, Stop: unwind.StopExpression}, 3 | 3<<3},
		// Beyond an entry: stops.
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 1 << 16, RA: -8}, 3 | unwind.StopLargeOffset<<3},
		{unwind.Rule{Base: unwind.BaseRSP, Offset: 8, RA: -16}, 3 | unwind.StopLargeOffset<<3},
		{unwind.Rule{Base: unwind.BaseRBP, Offset: 16, RBP: -12, RA: -8}, 3 | unwind.StopLargeOffset<<3},
	} {
		if got := packRule(tc.r); got != tc.want {
			t.Errorf("packRule(%v) = %#x, want %#x", tc.r, got, tc.want)
		}
	}
}

// TestPathHash: FNV-1a 64, as bpf/unwind.h's path_hash, of at most 255
// bytes (the loader's names are read into 256 with their NUL).
func TestPathHash(t *testing.T) {
	if got := pathHash(""); got != 0xcbf29ce484222325 {
		t.Errorf("empty: %#x", got)
	}
	if got := pathHash("a"); got != 0xaf63dc4c8601ec8c {
		t.Errorf("a: %#x", got)
	}
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'x'
	}
	if pathHash(string(long)) != pathHash(string(long[:255])) {
		t.Error("bytes past 255 change the hash")
	}
}

// TestUnwindTablesRoom: each file a traced process maps gets a table of
// its own, once; files whose tables go past the room are counted, and the
// others keep theirs.
func TestUnwindTablesRoom(t *testing.T) {
	needProbes(t)
	for _, tc := range []struct {
		room       uint32
		made, lost int
	}{
		// sleep, libc and the loader.
		{0, 3, 0},
		{1, 0, 3},
	} {
		p, err := LoadProbes(ProbeConfig{StackDepth: 16, UnwindEntries: tc.room})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/sleep", "10")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Until the loader has mapped libc.
		for i := 0; i < 200; i++ {
			maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
			if strings.Contains(string(maps), "libc.so.6") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		err = p.LoadUnwind(cmd.Process.Pid)
		// Again: nothing more is made or lost for files seen.
		if err == nil {
			err = p.LoadUnwind(cmd.Process.Pid)
		}
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if p.unwind.held != tc.made || p.UnwindTablesLost() != tc.lost {
			t.Errorf("room %d: %d tables made, %d lost; want %d and %d", tc.room, p.unwind.held, p.UnwindTablesLost(), tc.made, tc.lost)
		}
		p.Close()
	}
}

// chainLeakFrames returns the function names of the backtrace of
// chain_gcc_o2's leak (its block of 4321 bytes) in snap.
func chainLeakFrames(snap *leak.Snapshot, names map[uint64][]string) []string {
	var frames []string
	for _, a := range snap.Allocs {
		if a.Size == 4321 {
			frames = names[a.StackID]
		}
	}
	return frames
}

// chainToMain reports whether the leak's frames go from chain_12 through
// its 11 callers to main.
func chainToMain(frames []string) bool {
	return len(frames) >= 13 && frames[0] == "chain_12" && frames[12] == "main"
}

// TestWalksWithoutList: a backtrace taken before the process's unwind
// tables are in place follows frame pointers alone, and is counted as one
// that may end early: in code built -O2 without frame pointers it does
// not get past the first frame, but to what rbp holds. With the tables, the same chain reaches main, and
// nothing is counted.
func TestWalksWithoutList(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "chain_gcc_o2")
	for _, tables := range []bool{false, true} {
		if tables {
			readyHook = func(p *Probes, pid int) error { return p.LoadUnwind(pid) }
		}
		snap, names, c, st := exitSnapshot(t, ProbeConfig{StackDepth: 32}, prog, "100")
		readyHook = nil
		if !st.Known || st.Code != 0 {
			t.Errorf("tables %v: exit status = %+v, want code 0", tables, st)
		}
		frames := chainLeakFrames(snap, names)
		// 100 pairs and the leak, and chain's printf buffer.
		walked := c.Allocs
		if c.Allocs < 101 {
			t.Errorf("tables %v: %d allocations, want 101 or more", tables, c.Allocs)
		}
		if !tables {
			if len(frames) == 0 || frames[0] != "chain_12" || slices.Contains(frames, "chain_11") || c.UnwindNoList != walked {
				t.Errorf("without tables: leak's frames %q, %d walks counted without a list of %d; want chain_12 and not its caller, all of them", frames, c.UnwindNoList, walked)
			}
			continue
		}
		if !chainToMain(frames) || c.UnwindNoList != 0 {
			t.Errorf("with tables: leak's frames %q, %d walks counted without a list; want chain_12 to main, none", frames, c.UnwindNoList)
		}
	}
}

// TestUnwindPool: the tables of a process's files (the executable's 79
// entries, the loader's and libc's thousands) go into arrays placed ahead,
// larger than they are, and the walk through them is the same: the leak
// of chain_gcc_o2 reaches main.
func TestUnwindPool(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "chain_gcc_o2")
	var fromPool, placed int
	readyHook = func(p *Probes, pid int) error {
		u := p.unwind
		pooled := map[uint32]bool{}
		for i := 0; ; i++ {
			full := true
			u.poolMu.Lock()
			for c := poolMinShift; c <= poolMaxShift; c++ {
				full = full && len(u.pool.ready[c]) == poolDepth
				for _, pt := range u.pool.ready[c] {
					pooled[pt.table] = true
				}
			}
			u.poolMu.Unlock()
			if full {
				break
			}
			if i == 200 {
				return fmt.Errorf("the pool was not full after 2 s")
			}
			clear(pooled)
			time.Sleep(10 * time.Millisecond)
		}
		if err := p.LoadUnwind(pid); err != nil {
			return err
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, f := range u.files {
			if f.count > 0 {
				placed++
				if pooled[f.table] {
					fromPool++
				}
			}
		}
		return nil
	}
	defer func() { readyHook = nil }()
	snap, names, c, _ := exitSnapshot(t, ProbeConfig{StackDepth: 32}, prog, "100")
	if placed < 3 || fromPool != placed {
		t.Errorf("%d of the %d tables placed came from the pool, want all of 3 or more", fromPool, placed)
	}
	frames := chainLeakFrames(snap, names)
	if !chainToMain(frames) || c.UnwindNoList != 0 {
		t.Errorf("leak's frames %q, %d walks counted without a list; want chain_12 to main, none", frames, c.UnwindNoList)
	}
}

// TestPoolClass: a table takes the smallest power of two that holds it,
// 64 at least; one past the largest class is placed as it comes.
func TestPoolClass(t *testing.T) {
	for _, tc := range []struct {
		n    uint32
		want int
	}{{0, -1}, {1, 6}, {64, 6}, {65, 7}, {79, 7}, {11876, 14}, {1 << 15, 15}, {1<<15 + 1, -1}} {
		if got := poolClass(tc.n); got != tc.want {
			t.Errorf("poolClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}
