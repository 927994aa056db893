//go:build linux

package tracer

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/internal/fixture"
)

// TestBusyCalls: with the probes on libc for every process, counting
// calls (--all --inject), a process is told on the busy reader once, when
// its count reaches BusyCalls, and not before; an exec starts its count
// anew, and the new program is told again at its own BusyCalls-th call,
// or at its EagerHead-th once its file is marked eager.
// testdata/busyleak, idle, calls the allocator only on command: 3000
// mallocs to hold, 3000 frees to release.
func TestBusyCalls(t *testing.T) {
	needProbes(t)
	t.Run("file", func(t *testing.T) { busyCalls(t, testProg(t, "busyleak")) })
	// As a container's program (see OverlayCopy).
	t.Run("overlayfs", func(t *testing.T) { busyCalls(t, fixture.OverlayCopy(t, testProg(t, "busyleak"))) })
}

func busyCalls(t *testing.T, exe string) {
	const busyAt = 5000
	const eagerAt = 100
	probes, err := LoadProbes(ProbeConfig{All: true, CountCalls: true, BusyCalls: busyAt, EagerHead: eagerAt, SampleBytes: 4096, NoBatch: true, MaxAllocs: 1 << 16})
	if err != nil {
		t.Fatalf("LoadProbes: %v", err)
	}
	defer probes.Close()

	pid, stdin, lines := startBusyleak(t, exe, "BUSYLEAK_IDLE=1")
	do := func(command, answer string) {
		t.Helper()
		if command != "" {
			io.WriteString(stdin, command+"\n")
		}
		line, err := lines.ReadString('\n')
		if strings.TrimSpace(line) != answer {
			t.Fatalf("busyleak answered %q (%v), want %q", line, err, answer)
		}
	}
	attachAllocator(t, probes, pid)
	busy, err := probes.WatchBusy()
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// told returns how many times the reader told of busyleak, busy and
	// soon to be: each event is in the ring buffer once the call that made
	// it returned.
	told2 := func() (nbusy, nsoon int) {
		for {
			got, ahead, err := busy.Next(time.Now().Add(100 * time.Millisecond))
			if errors.Is(err, ErrNoRecord) {
				return nbusy, nsoon
			}
			if err != nil {
				t.Fatal(err)
			}
			if got == pid && ahead {
				nsoon++
			} else if got == pid {
				nbusy++
			}
		}
	}
	// soonTold is how many times the reader told of busyleak soon busy,
	// as told2 read them.
	soonTold := 0
	told := func() int {
		n, soon := told2()
		soonTold += soon
		return n
	}
	soon := func(want int, when string) {
		t.Helper()
		if soonTold != want {
			t.Errorf("told %d times that busyleak would be busy %s, want %d", soonTold, when, want)
		}
		soonTold = 0
	}
	// raw checks the count as the busy event counts it: from the head.
	raw := func(lo, hi uint64) {
		t.Helper()
		all, err := probes.ProcCalls(func(int) bool { return true })
		if n := all[pid]; err != nil || n < lo || n > hi {
			t.Errorf("busyleak's count of calls from its head: %d (%v), want %d to %d", n, err, lo, hi)
		}
	}
	calls := func(lo, hi uint64) {
		t.Helper()
		n, err := probes.ProcCallsOf(pid)
		if err != nil || n < lo || n > hi {
			t.Errorf("busyleak's count of calls: %d (%v), want %d to %d", n, err, lo, hi)
		}
	}

	do("hold", "held")
	calls(3000, 3010)
	if n := told(); n != 0 {
		t.Errorf("told %d times after 3000 calls, want none before %d", n, busyAt)
	}
	// A quarter of the way, 1250 calls.
	soon(1, "by its 3000th call")
	do("release", "released")
	calls(6000, 6010)
	if n := told(); n != 1 {
		t.Errorf("told %d times after 6000 calls, want once", n)
	}
	do("hold", "held")
	if n := told(); n != 0 {
		t.Errorf("told %d times more after 9000 calls, want once in all", n)
	}
	soon(0, "again")

	// A new program is counted from none.
	do("exec", "ready")
	calls(0, 100)
	// Its frees of null pointers: glibc's free returns before the probe.
	do("release", "released")
	calls(0, 100)
	if n := told(); n != 0 {
		t.Errorf("the new program was told of %d times after its first calls, want none", n)
	}
	soon(0, "at the new program's start")
	do("hold", "held")
	do("release", "released")
	if n := told(); n != 1 {
		t.Errorf("the new program was told of %d times after 6000 calls, want once", n)
	}
	soon(1, "in the new program's 6000 calls")

	// Its program marked eager, a new run of it is told at its 100th
	// call: its count starts 100 short of 5000.
	if before, err := probes.MarkEager(pid); err != nil || before {
		t.Fatalf("MarkEager: marked before %v, %v; want a first mark", before, err)
	}
	if before, err := probes.MarkEager(pid); err != nil || !before {
		t.Fatalf("MarkEager again: marked before %v, %v; want true", before, err)
	}
	do("exec", "ready")
	calls(0, 90)
	raw(busyAt-eagerAt, busyAt-eagerAt+90)
	if n := told(); n != 0 {
		t.Errorf("the eager run was told of %d times at its start, want none", n)
	}
	// At its exec: its 100 calls leave no time to probe the shim's sites.
	soon(1, "at the eager run's start")
	do("hold", "held")
	calls(3000, 3090)
	if n := told(); n != 1 {
		t.Errorf("the eager run was told of %d times after 3000 calls, want once", n)
	}
	soon(0, "in the eager run's calls")

	// The count set anew (the cost of a trap measured): the next run
	// starts 100 short of it, and is told at it.
	if err := probes.SetBusyCalls(2 * busyAt); err != nil {
		t.Fatal(err)
	}
	do("exec", "ready")
	calls(0, 90)
	raw(2*busyAt-eagerAt, 2*busyAt-eagerAt+90)
	do("hold", "held")
	if n := told(); n != 1 {
		t.Errorf("the run after the count was set anew was told of %d times after 3000 calls, want once", n)
	}
	soon(1, "in the eager run after the count was set anew")
	// Not marked eager, a run is told soon busy at its 2500th call.
	var key bpf.MdtraceProgramFile
	var v uint32
	for it := probes.objs.EagerPrograms.Iterate(); it.Next(&key, &v); {
		if err := probes.objs.EagerPrograms.Delete(key); err != nil {
			t.Fatal(err)
		}
	}
	do("exec", "ready")
	do("hold", "held")
	if n := told(); n != 0 {
		t.Errorf("a run no longer eager was told of %d times after 3000 calls, want none before %d", n, 2*busyAt)
	}
	soon(1, "in a run no longer eager, by its 3000th call")
	io.WriteString(stdin, "exit\n")
}

// TestCallsUncounted: where the table of counts has no room (a table of
// one, taken), a process's calls are counted as uncounted, each of them,
// and it is never told of, as --all says at its end.
func TestCallsUncounted(t *testing.T) {
	needProbes(t)
	probes, err := LoadProbes(ProbeConfig{All: true, CountCalls: true, BusyCalls: 100, CountedProcesses: 1, SampleBytes: 4096, NoBatch: true, MaxAllocs: 1 << 16})
	if err != nil {
		t.Fatalf("LoadProbes: %v", err)
	}
	defer probes.Close()
	// The one entry, for a process that cannot exist (past pid_max's most).
	if err := probes.objs.ProcCalls.Put(uint32(1<<22+1), bpf.MdtraceProcCount{Calls: 1}); err != nil {
		t.Fatal(err)
	}
	pid, stdin, lines := startBusyleak(t, testProg(t, "busyleak"), "BUSYLEAK_IDLE=1")
	attachAllocator(t, probes, pid)
	busy, err := probes.WatchBusy()
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(stdin, "hold\n")
	if line, err := lines.ReadString('\n'); line != "held\n" {
		t.Fatalf("busyleak answered %q (%v), want held", line, err)
	}
	c, err := probes.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// Other processes' calls count too: at least busyleak's 3000.
	if c.CallsUncounted < 3000 {
		t.Errorf("%d calls counted as uncounted after busyleak's 3000 mallocs, want 3000 or more", c.CallsUncounted)
	}
	if n, err := probes.ProcCallsOf(pid); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("busyleak's count: %d (%v), want none", n, err)
	}
	for {
		got, _, err := busy.Next(time.Now().Add(100 * time.Millisecond))
		if errors.Is(err, ErrNoRecord) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if got == pid {
			t.Errorf("busyleak was told of, with no count")
		}
	}
	io.WriteString(stdin, "exit\n")
}

// TestQuiet: quiet_on is set while any thread is passed over, and a thread
// never passed over (its Put failed) changes nothing when let go.
func TestQuiet(t *testing.T) {
	needProbes(t)
	p, err := LoadProbes(ProbeConfig{All: true, CountCalls: true, BusyCalls: 8192, SampleBytes: 4096, NoBatch: true, MaxAllocs: 1 << 16})
	if err != nil {
		t.Fatalf("LoadProbes: %v", err)
	}
	defer p.Close()
	on := func() uint32 {
		var v uint32
		if err := p.objs.QuietOn.Get(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i, step := range []struct {
		tid  int
		on   bool
		want uint32
	}{{100, true, 1}, {101, true, 1}, {100, false, 1}, {102, false, 1}, {101, false, 0}, {103, false, 0}} {
		if err := p.Quiet(step.tid, step.on); err != nil {
			t.Fatalf("step %d: Quiet(%d, %v): %v", i, step.tid, step.on, err)
		}
		if got := on(); got != step.want {
			t.Errorf("step %d: Quiet(%d, %v): quiet_on %d, want %d", i, step.tid, step.on, got, step.want)
		}
	}
	if p.quiet != 0 {
		t.Errorf("%d threads counted as passed over at the end, want 0", p.quiet)
	}
}

// startBusyleak starts testdata's busyleak from exe with env added, waits
// for its "ready", and returns its pid, its standard input and its
// output; it is ended with the test. It runs under a seccomp filter: an
// e2e test's --all --inject, which may be running beside this one, would
// take its calls.
func startBusyleak(t *testing.T, exe string, env ...string) (int, io.Writer, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), "BUSYLEAK_SECCOMP=1"), env...)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := bufio.NewReader(out)
	if line, err := lines.ReadString('\n'); line != "ready\n" {
		t.Fatalf("busyleak said %q (%v), want ready", line, err)
	}
	return cmd.Process.Pid, stdin, lines
}

// attachAllocator attaches probes, for every process, to the allocator of
// process pid.
func attachAllocator(t *testing.T, probes *Probes, pid int) {
	t.Helper()
	lib, err := AllocatorOfRunning(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := probes.Attach(0, lib); err != nil {
		t.Fatalf("Attach: %v", err)
	}
}
