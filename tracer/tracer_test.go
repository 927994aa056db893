//go:build linux

package tracer

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/internal/fixture"
	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// needProbes skips a test that needs root and uprobes where they are
// really missing, and says why.
func needProbes(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE) to load BPF programs and attach uprobes")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("needs a kernel with BTF (/sys/kernel/btf/vmlinux)")
	}
}

// testProg returns the path of testdata's program name, built once.
func testProg(t *testing.T, name string) string { return fixture.Program(t, name) }

// leakSite is an allocation the test expects to be live at exit.
type leakSite struct {
	size uint64
	fn   string
}

// exitSnapshot launches prog under the probes and returns the live table,
// its frames' function names and the counters, read at the process's exit.
func exitSnapshot(t *testing.T, cfg ProbeConfig, argv ...string) (*leak.Snapshot, map[uint64][]string, Counters, ExitStatus) {
	t.Helper()
	return exitSnapshotEnv(t, cfg, nil, argv...)
}

// exitHook, when set, is called with the probes at the process's exit,
// before exitSnapshot reads the live table.
var exitHook func(*Probes)

// readyHook, when set, is called with the probes and the process once its
// allocator is probed, before it runs.
var readyHook func(*Probes, int) error

// exitSnapshotEnv is exitSnapshot with the environment env (nil: the
// test's own).
func exitSnapshotEnv(t *testing.T, cfg ProbeConfig, env []string, argv ...string) (*leak.Snapshot, map[uint64][]string, Counters, ExitStatus) {
	t.Helper()
	probes, err := LoadProbes(cfg)
	if err != nil {
		t.Fatalf("LoadProbes: %v", err)
	}
	defer probes.Close()
	var (
		snap  *leak.Snapshot
		names = map[uint64][]string{}
	)
	sym := stacks.NewSymbolizer()
	proc, err := Launch(argv, env, nil, Hooks{
		Ready: func(pid int) error {
			lib, err := AllocatorOfExec(pid)
			if err != nil {
				return err
			}
			if err := probes.Attach(pid, lib); err != nil {
				return err
			}
			if readyHook != nil {
				return readyHook(probes, pid)
			}
			return nil
		},
		Exit: func(pid int) {
			if exitHook != nil {
				exitHook(probes)
			}
			s, err := probes.Snapshot(pid)
			if err != nil {
				t.Errorf("Snapshot: %v", err)
				return
			}
			snap = s
			maps, err := stacks.ReadMaps(pid)
			if err != nil {
				t.Errorf("ReadMaps: %v", err)
				return
			}
			for id, pcs := range snap.Stacks {
				for _, f := range sym.Symbolize(pid, maps, pcs) {
					names[id] = append(names[id], f.Func)
				}
			}
		},
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	st, err := proc.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	c, err := probes.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if snap == nil {
		t.Fatal("the exit hook did not run")
	}
	return snap, names, c, st
}

func TestLaunchLeaks(t *testing.T) {
	t.Run("uprobe_multi", func(t *testing.T) { testLaunchLeaks(t, false) })
	t.Run("perf_links", func(t *testing.T) { testLaunchLeaks(t, true) })
}

func testLaunchLeaks(t *testing.T, perProbe bool) {
	needProbes(t)
	prog := testProg(t, "leaky")
	snap, names, c, st := exitSnapshot(t, ProbeConfig{StackDepth: 16, PerProbeLinks: perProbe}, prog, "7")
	if !st.Known || st.Code != 7 {
		t.Errorf("exit status = %+v, want code 7", st)
	}
	want := []leakSite{
		{4096, "leak_pvalloc"}, {1024, "leak_aligned_alloc"}, {1013, "leak_in_constructor"}, {1012, "leak_failed_realloc"},
		{1011, "leak_failed_reallocarray"}, {1009, "leak_valloc"}, {1008, "leak_posix_memalign"},
		{1006, "leak_memalign"}, {1005, "leak_reallocarray"}, {1004, "leak_realloc_grow"},
		{1003, "leak_realloc_new"}, {1002, "leak_calloc"}, {1001, "leak_malloc"},
	}
	got := snap.Allocs
	sort.Slice(got, func(i, j int) bool { return got[i].Size > got[j].Size })
	var gotSites []leakSite
	for _, a := range got {
		fn := ""
		if n := names[a.StackID]; len(n) > 0 {
			fn = n[0]
			if fn != "leak_in_constructor" && (len(n) < 2 || n[1] != "main") {
				t.Errorf("leak of %d: frames %v, want %s then main", a.Size, n, fn)
			}
		}
		gotSites = append(gotSites, leakSite{a.Size, fn})
	}
	if fmt.Sprint(gotSites) != fmt.Sprint(want) {
		t.Errorf("live at exit:\n got %v\nwant %v", gotSites, want)
	}
	if c.TableFull != 0 || c.StackFull != 0 || c.StackCollision != 0 || c.StackError != 0 || c.StateError != 0 || c.MissedReturn != 0 {
		t.Errorf("losses counted: %+v", c)
	}
	// 12 leaks + 2 blocks grown or moved by realloc + 1 freed by realloc(p, 0)
	// + 10000 churn + 3 calloc/realloc + 1 memalign in churn.
	if c.Allocs < 10000 {
		t.Errorf("allocations counted = %d, want at least 10000", c.Allocs)
	}
	// A failed realloc, which keeps its block, counts no free.
	if c.Allocs-c.Frees != uint64(len(snap.Allocs)) {
		t.Errorf("%d allocations, %d frees, %d live", c.Allocs, c.Frees, len(snap.Allocs))
	}
	t.Logf("counters: %+v", c)
}

func TestAttachSeesOnlyNewBlocks(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "attachee")
	// The target is a grandchild: were the test both its parent and its
	// tracer, the test's own wait would take the tracer's stops.
	cmd := exec.Command("sh", "-c", `exec 3<&0; "$0" <&3 3<&- & echo $!; wait`, prog)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	// The shell's "$!" and the target's "ready" come in either order.
	pid, ready := 0, false
	for i := 0; i < 2; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the target's output: %v", err)
		}
		if line == "ready\n" {
			ready = true
		} else if _, err := fmt.Sscanf(line, "%d", &pid); err != nil {
			t.Fatalf("unexpected line %q", line)
		}
	}
	if !ready || pid == 0 {
		t.Fatalf("no pid (%d) or no ready (%v)", pid, ready)
	}
	probes, err := LoadProbes(ProbeConfig{StackDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer probes.Close()
	var snap *leak.Snapshot
	proc, err := Attach(pid, Hooks{
		Ready: func(pid int) error {
			lib, err := AllocatorOfRunning(pid)
			if err != nil {
				return err
			}
			return probes.Attach(pid, lib)
		},
		Exit: func(pid int) { snap, _ = probes.Snapshot(pid) },
	})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "go\n")
	if line, _ := r.ReadString('\n'); line != "done\n" {
		t.Fatalf("attachee said %q", line)
	}
	stdin.Close()
	cmd.Wait()
	proc.Wait()
	if snap == nil {
		t.Fatal("no snapshot at exit")
	}
	var sizes []string
	for _, a := range snap.Allocs {
		sizes = append(sizes, fmt.Sprint(a.Size))
	}
	sort.Strings(sizes)
	if got := strings.Join(sizes, " "); got != "3001 3002 3003" {
		t.Errorf("live at exit: %s, want 3001 3002 3003", got)
	}
	c, _ := probes.Counters()
	if c.UnknownFrees < 5 {
		t.Errorf("frees of blocks from before the attach = %d, want >= 5", c.UnknownFrees)
	}
}

func TestFullMapsAreCounted(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "leaky")
	// Room for 4 live blocks, the smallest table: two buckets of 16
	// slots. And for 3 unique backtraces.
	snap, _, c, _ := exitSnapshot(t, ProbeConfig{StackDepth: 16, MaxAllocs: 4, MaxStacks: 3}, prog)
	if len(snap.Allocs) > 2*abi.BucketSlots {
		t.Errorf("%d live blocks in a table of %d slots", len(snap.Allocs), 2*abi.BucketSlots)
	}
	if c.TableFull == 0 || c.StackFull == 0 {
		t.Errorf("losses not counted: %+v", c)
	}
	// Every block that went in is a free found or a block left.
	if c.Allocs-c.Frees != uint64(len(snap.Allocs)) {
		t.Errorf("%d allocations, %d frees, %d live", c.Allocs, c.Frees, len(snap.Allocs))
	}

	if len(snap.Stacks) > 3 {
		t.Errorf("%d stacks in a map of 3", len(snap.Stacks))
	}
	t.Logf("counters: %+v", c)
}

func TestWrongPIDSeesNothing(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "leaky")
	probes, err := LoadProbes(ProbeConfig{StackDepth: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer probes.Close()
	// Probes for another process (a sleep, which allocates nothing once
	// it sleeps; not this test, whose runtime may start a thread through
	// the C library meanwhile) do not fire in leaky.
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		t.Skipf("no glibc at the Debian path: %v", err)
	}
	sleep := exec.Command("/bin/sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sleep.Process.Kill()
		sleep.Wait()
	}()
	for i := 0; ; i++ {
		if stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sleep.Process.Pid)); strings.Contains(string(stat), ") S ") {
			break
		}
		if i == 200 {
			t.Fatal("sleep did not sleep within 2 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := probes.Attach(sleep.Process.Pid, stacks.LocalFile(libc)); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(prog).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	c, _ := probes.Counters()
	if c.Allocs != 0 || c.Frees != 0 || c.UnknownFrees != 0 {
		t.Errorf("probes for PID %d fired in another process: %+v", sleep.Process.Pid, c)
	}
}

// shimEnv builds the shim and returns the environment that preloads it
// into a launched command as mdtrace does, with extra variables.
func shimEnv(t *testing.T, options string, extra ...string) []string {
	t.Helper()
	if out, err := exec.Command("make", "-s", "-C", "..", "bin/libmdshim.so").CombinedOutput(); err != nil {
		t.Fatalf("building the shim: %v\n%s", err, out)
	}
	shim, err := filepath.Abs("../bin/libmdshim.so")
	if err != nil {
		t.Fatal(err)
	}
	// MDSHIM_CTL: under mdtrace; no signal or leak info call reaches it here.
	env := PreloadEnv(os.Environ(), shim, abi.EnvOptions+"="+options, abi.EnvCtl+"=/nonexistent")
	return append(env, extra...)
}

// TestBatchHandoff: blocks allocated in some threads and freed in others,
// each thread handing its calls over a batch at a time, so that frees come
// before their blocks' allocations; then the process ends while its
// threads' batches hold calls, by returning from main and by _exit, which
// runs no exit handler. The exit snapshot (the batches read from the
// process) and the counters after the end (each thread's batch drained as
// it ends) must both be exact, with no free left unmatched.
func TestBatchHandoff(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "handoff")
	for _, mode := range []string{"exit", "_exit"} {
		t.Run(mode, func(t *testing.T) {
			env := shimEnv(t, "backtrace leak_track", abi.EnvBatch+"=16")
			snap, names, c, st := exitSnapshotEnv(t, ProbeConfig{StackDepth: 16}, env, prog, "20000", "3", "3", "5", mode)
			if !st.Known || st.Code != 0 {
				t.Errorf("exit status = %+v, want 0", st)
			}
			// The program's blocks by first frame; glibc's own (thread
			// storage, stdio's buffer) are not counted.
			sites := map[string]int{}
			for _, a := range snap.Allocs {
				n := names[a.StackID]
				if len(n) > 0 && strings.HasPrefix(n[0], "handoff_") {
					sites[fmt.Sprintf("%s:%d", n[0], a.Size)]++
				}
			}
			if fmt.Sprint(sites) != "map[handoff_keep:4000:15 handoff_main:3000:2]" {
				t.Errorf("live at exit: %v, want 15 blocks of 4000 from handoff_keep and 2 of 3000 from handoff_main", sites)
			}
			// Every block that went in is a free found or a block left,
			// and every free found its block.
			if c.Allocs-c.Frees != uint64(len(snap.Allocs)) || c.UnknownFrees != 0 || c.Allocs < 60020 {
				t.Errorf("counted %d allocations, %d frees, %d unknown frees; %d live", c.Allocs, c.Frees, c.UnknownFrees, len(snap.Allocs))
			}
			if c.BatchLost != 0 || c.OrphansLost != 0 || c.TableFull != 0 || c.StackError != 0 {
				t.Errorf("losses counted: %+v", c)
			}
			// The case under test happened.
			if c.FreesEarly == 0 {
				t.Errorf("no free came before its block's batch: %+v", c)
			}
			t.Logf("counters: %+v", c)
		})
	}
}
