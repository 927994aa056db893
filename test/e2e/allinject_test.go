package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/internal/fixture"
)

// TestAllInject: `--all --inject` gives the shim to a busy process
// (testdata/busyleak, -O2 without frame pointers, whose thread mallocs and
// frees without a pause once told) while it runs, once it has called the
// allocator 8192 times and not before. The process's blocks sampled by
// the probes before, freed after through the shim, leave the table; its
// leaks after are estimated as sampling estimates them, leak_large's 2000
// blocks exactly (a block of 4096 bytes is always sampled), with their
// sites named through the shim's frames, and so are the blocks from
// realloc(NULL) and aligned_alloc, kept or freed, and those freed by
// realloc to 0 bytes, for which glibc calls its own malloc and free; its GOT slots hold the shim's
// hooks while injected and are given back at the end, and it goes on to
// exit normally.
func TestAllInject(t *testing.T) {
	needRoot(t)
	const interval = 4096
	exe := prog("busyleak")
	// Idle until told: its calls stay below the 8192 that get it the
	// shim until then.
	target, pid := startBusy(t, "BUSYLEAK_IDLE=1")
	slots := gotSlots(t, pid, exe)
	before := readSlots(t, pid, slots)
	m := startAllInject(t, t.TempDir(), "--backtrace", "--format", "json")
	// Blocks the probes sample before the shim takes the calls: 3000
	// calls, the shim not yet.
	io.WriteString(target.stdin, "hold\n")
	target.expectLine(t, "held")
	if strings.Contains(m.stderr.String(), "its calls go through mdtrace's shim") {
		t.Fatalf("busyleak was given the shim before its 8192nd call:\n%s", m.stderr.String())
	}
	io.WriteString(target.stdin, "spin\n")
	target.expectLine(t, "spinning")
	// About 664 of the 3000 blocks of 1024 bytes (1 - e^(-1/4) of them),
	// within five standard deviations.
	if n := waitAdopted(t, m, pid, "busyleak"); n < 550 || n > 780 {
		t.Errorf("%d blocks taken over, want about 664 of the 3000 held", n)
	}
	slotsInShim(t, pid, slots)
	io.WriteString(target.stdin, "release\n")
	target.expectLine(t, "released")
	io.WriteString(target.stdin, "leak\n")
	target.expectLine(t, "leaked")
	out := m.interrupt(t)
	// busyleak calls the allocator only through GOT slots, glibc's own
	// among them, bound lazily (calloc, realloc): nothing traps (42000
	// calls without the bypasses of realloc and memalign, 6 without
	// glibc's lazy slots routed).
	if want := fmt.Sprintf("mdtrace: --inject: process %d (%s): 0 calls reached the allocator's probes after the shim took its calls (calls through pointers to the allocator taken before, the loader's own)\n", pid, exe); !strings.Contains(m.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, m.stderr.String())
	}
	checkTakenCount(t, m.stderr.String(), 0)
	slotsBack(t, pid, slots, before, "after the audit")
	busyExit(t, target)

	r, ok := lastRow(t, out, pid)
	if !ok {
		t.Fatalf("process %d is not in the last summary:\n%s", pid, out)
	}
	// The loader's blocks for the shim itself are passed over
	// (TestAllInjectLoaderQuiet). The 2000 blocks of 4096 bytes
	// from realloc(NULL) and aligned_alloc are always sampled: exact.
	checkSampledTotals(t, "busyleak's row", float64(r.AddedBlocks-2000), float64(r.AddedBytes-2000*4096), interval)
	checkLargeSite(t, r)
	// glibc's realloc and aligned_alloc call its malloc and free for
	// these: each block once, and the frees seen.
	exact := map[string]int64{"leak_realloc_null": 1000, "leak_aligned": 1000}
	for _, s := range r.Sites {
		if len(s.Frames) == 0 {
			continue
		}
		switch f := s.Frames[0].Function; f {
		case "hold_block", "free_by_realloc", "churn_realloc_null", "churn_aligned":
			t.Errorf("blocks freed are still live: a site of %d blocks, %d bytes from %s", s.Blocks, s.Bytes, f)
		case "leak_realloc_null", "leak_aligned":
			if s.Blocks != exact[f] || s.Bytes != exact[f]*4096 {
				t.Errorf("%s's site: %d blocks, %d bytes; want %d of 4096 bytes", f, s.Blocks, s.Bytes, exact[f])
			}
			delete(exact, f)
		}
	}
	for f := range exact {
		t.Errorf("no site of %s's blocks", f)
	}
}

// TestAllInjectSeccomp: a busy process under a seccomp filter keeps its
// calls with the probes under --all --inject, and the audit says why: the
// filter could kill it at a system call the injection makes it make.
func TestAllInjectSeccomp(t *testing.T) {
	needRoot(t)
	target, pid := startBusy(t, "BUSYLEAK_SECCOMP=1")
	m := startAllInject(t, t.TempDir())
	refused := regexp.MustCompile(fmt.Sprintf(`mdtrace: --inject: process %d \([^)]*/busyleak\) called the allocator 8192 times or more, but its calls stay with the probes: it runs under a seccomp filter, which the shim's loading could break\n`, pid))
	found := waitStderr(m, refused, 1) != nil
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d", code)
	}
	if !found {
		t.Errorf("no refusal of the process under seccomp:\n%s", m.stderr.String())
	}
	if strings.Contains(m.stderr.String(), "its calls go through mdtrace's shim") {
		t.Errorf("a process was given the shim:\n%s", m.stderr.String())
	}
	busyExit(t, target)
}

// TestAllInjectExec: a process taken by --all --inject that executes its
// own program anew loses the shim with its program; busy again, it is
// taken anew, and at the end given back.
func TestAllInjectExec(t *testing.T) {
	needRoot(t)
	// A copy of its own: the runs of busyleak that other tests make
	// meanwhile would count among those said. It is on an overlayfs, as a
	// container's program, whose file stat does not name as the kernel
	// does.
	exe := fixture.OverlayCopy(t, prog("busyleak"))
	target := startEnv(t, nil, exe)
	target.expectLine(t, "ready")
	pid := target.cmd.Process.Pid
	// A count far from the eager runs' 256.
	m := startAllInject(t, t.TempDir(), "--inject-calls", "200000")
	waitTaken(t, m, pid, 1)
	io.WriteString(target.stdin, "exec\n")
	target.expectLine(t, "ready")
	// Its new run is taken at its 256th call: its program was taken. Its
	// calls trap until the shim's sites are probed and its calls routed,
	// 10 to 50 ms: 30,000 to 60,000 of busyleak's calls here, at 0.5 µs a
	// trap; fewer where traps cost more.
	if again := waitTaken(t, m, pid, 2); !strings.HasPrefix(again[1], "runs a program") {
		t.Errorf("busyleak, executed anew, was taken as %q, not as a run of a program taken before", again[1])
	} else if n, _ := strconv.Atoi(again[2]); n < 256 || n >= 150000 {
		t.Errorf("busyleak, executed anew, was taken after %d calls, want from its 256th:\n%s", n, m.stderr.String())
	}
	// Three runs of it are said one by one, the third saying that the
	// later ones are not; the fourth is taken without a line.
	for n := 3; n <= 5; n++ {
		io.WriteString(target.stdin, "exec\n")
		target.expectLine(t, "ready")
		if n <= 4 {
			waitTaken(t, m, pid, n)
		}
	}
	time.Sleep(time.Second)
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d", code)
	}
	stderr := m.stderr.String()
	if n := len(takenRe(pid).FindAllString(stderr, -1)); n != 4 {
		t.Errorf("%d lines say busyleak was taken, want 4:\n%s", n, stderr)
	}
	if want := fmt.Sprintf("; the later runs of %s are taken without a line each, counted at the end\n", exe); strings.Count(stderr, want) != 1 {
		t.Errorf("stderr lacks %q once:\n%s", want, stderr)
	}
	checkTakenCount(t, stderr, 4)
	busyExit(t, target)
}

// TestAllInjectAgain: a process given back by one --all --inject keeps the
// shim mapped, inactive; the next audit starts that shim again rather than
// refuse the process, with its own options: the first audit takes no
// backtraces, the second does, and names leak_large's 2000 blocks (always
// sampled) from main, with nothing trapping after and the GOT slots given
// back at its end.
func TestAllInjectAgain(t *testing.T) {
	needRoot(t)
	exe := prog("busyleak")
	target, pid := startBusy(t)
	slots := gotSlots(t, pid, exe)
	before := readSlots(t, pid, slots)
	for i, args := range [][]string{nil, {"--backtrace", "--format", "json"}} {
		m := startAllInject(t, t.TempDir(), args...)
		waitTaken(t, m, pid, 1)
		slotsInShim(t, pid, slots)
		if i == 1 {
			io.WriteString(target.stdin, "leak\n")
			target.expectLine(t, "leaked")
		}
		out := m.interrupt(t)
		if want := fmt.Sprintf("mdtrace: --inject: process %d (%s): 0 calls reached the allocator's probes after the shim took its calls", pid, exe); !strings.Contains(m.stderr.String(), want) {
			t.Errorf("audit %d: stderr lacks %q:\n%s", i+1, want, m.stderr.String())
		}
		slotsBack(t, pid, slots, before, fmt.Sprintf("after audit %d", i+1))
		if i == 0 {
			continue
		}
		r, ok := lastRow(t, out, pid)
		if !ok {
			t.Fatalf("process %d is not in the last summary:\n%s", pid, out)
		}
		checkLargeSite(t, r)
	}
	busyExit(t, target)
}

// TestAllInjectLoaderQuiet: the blocks the process's loader allocates for
// the shim as mdtrace loads it (dlopen's link map, its lists: 7 blocks of
// 4200 bytes in all, before the probes passed over the calls the injection
// makes) are the injection's, not the program's. With every allocation
// sampled (--sample-bytes 1), busyleak, which leaks nothing, has none in
// its row: only its thread's blocks in flight, of 64 bytes.
func TestAllInjectLoaderQuiet(t *testing.T) {
	needRoot(t)
	target, pid := startBusy(t, "BUSYLEAK_IDLE=1")
	m := startAllInject(t, t.TempDir(), "--backtrace", "--sample-bytes", "1", "--format", "json")
	io.WriteString(target.stdin, "spin\n")
	target.expectLine(t, "spinning")
	waitTaken(t, m, pid, 1)
	out := m.interrupt(t)
	busyExit(t, target)
	r, ok := lastRow(t, out, pid)
	if !ok {
		return
	}
	for _, s := range r.Sites {
		if len(s.Frames) == 0 || s.Frames[0].Function != "busy" || s.Bytes != s.Blocks*64 {
			t.Errorf("a site of %d blocks, %d bytes, frames %q; want only busy's blocks of 64 bytes", s.Blocks, s.Bytes, s.functions())
		}
	}
	if r.AddedBytes%64 != 0 || r.AddedBytes > 64*64 {
		t.Errorf("busyleak added %d blocks, %d bytes; want a few of 64 bytes, its thread's in flight", r.AddedBlocks, r.AddedBytes)
	}
}

// TestAllInjectForkChild: a child forked by a process --all --inject gave
// the shim to gives its calls back to the allocator at once, where the
// probes count every one: its 1000 blocks of 4096 bytes (always sampled)
// are all in its row (without, the first batch of them went to probes that
// were its parent's, and was lost).
func TestAllInjectForkChild(t *testing.T) {
	needRoot(t)
	target, pid := startBusy(t)
	m := startAllInject(t, t.TempDir(), "--format", "json")
	waitTaken(t, m, pid, 1)
	io.WriteString(target.stdin, "fork\n")
	line, _ := target.stdout.ReadString('\n')
	var child int
	if _, err := fmt.Sscanf(line, "child %d leaked", &child); err != nil {
		t.Fatalf("busyleak answered %q to fork", line)
	}
	// A scan sees the child and names it.
	time.Sleep(1200 * time.Millisecond)
	out := m.interrupt(t)
	busyExit(t, target)
	r, ok := lastRow(t, out, child)
	if !ok {
		t.Fatalf("the child %d is not in the last summary:\n%s", child, out)
	}
	if r.AddedBlocks != 1000 || r.AddedBytes != 1000*4096 {
		t.Errorf("the child added %d blocks, %d bytes; want 1000 of 4096 bytes", r.AddedBlocks, r.AddedBytes)
	}
}

// TestAllInjectForking: forkspin forks without a pause, as a shell does,
// and keeps 200 blocks of 4096 bytes it allocated under the audit (sampled
// always, taken over by the shim as the calls are routed). It is given the
// shim at its 2000th call, and then given it back, each in a stop where its
// thread is not inside a fork, whose handlers hold the shim's locks: a call
// of the shim's made there waited for the call's bound, 10 s, with the
// process held. No round of forkspin's takes a second, and every held
// block is taken over. One more is when the stop found the thread at the
// start of free() of the one small block it has live at a time, sampled
// (about 1 in 100).
func TestAllInjectForking(t *testing.T) {
	needRoot(t)
	target := start(t, prog("forkspin"))
	target.expectLine(t, "ready")
	pid := target.cmd.Process.Pid
	m := startAllInject(t, t.TempDir(), "--inject-calls", "2000", "--sample-bytes", "4096")
	io.WriteString(target.stdin, "go\n")
	if n := waitAdopted(t, m, pid, "forkspin"); n != 200 && n != 201 {
		t.Errorf("%d blocks taken over, want forkspin's 200 blocks of 4096 bytes (and the small block being freed, if sampled)", n)
	}
	time.Sleep(300 * time.Millisecond)
	m.interrupt(t)
	if bad := fmt.Sprintf("--inject: giving process %d's calls back to the allocator: ", pid); strings.Contains(m.stderr.String(), bad) {
		t.Errorf("forkspin's calls were not given back:\n%s", m.stderr.String())
	}
	io.WriteString(target.stdin, "quit\n")
	line, _ := target.stdout.ReadString('\n')
	var forks, longest int
	if _, err := fmt.Sscanf(line, "forks %d longest %d\n", &forks, &longest); err != nil {
		t.Fatalf("forkspin said %q: %v", line, err)
	}
	if forks == 0 || longest >= 1000 {
		t.Errorf("forkspin forked %d times, its longest round took %d ms; want some, under 1000", forks, longest)
	}
	if code := target.wait(t); code != 0 {
		t.Errorf("forkspin exit status %d", code)
	}
}

// TestAllInjectBurst: busyleak is given the shim in the middle of a burst
// of 80000 calls that keeps 10000 blocks of 4096 bytes (always sampled).
// The calls are routed once the probes on the shim's sites are live: every
// block is counted, whether the probes on the allocator saw it, or the
// shim took it.
func TestAllInjectBurst(t *testing.T) {
	needRoot(t)
	target, pid := startBusy(t, "BUSYLEAK_IDLE=1")
	checkBurst(t, target, pid)
}

// TestAllInjectPIDNamespace: busyleak runs in a PID namespace of its own
// (as in a container that shares the host's files), where it cannot see
// mdtrace's pid, which the shim looks for while it holds its batches. It is
// taken, its burst counted whole, and the shim writes nothing to it.
func TestAllInjectPIDNamespace(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare (util-linux) to start a process in a PID namespace of its own")
	}
	target := startEnv(t, []string{"BUSYLEAK_IDLE=1"}, "unshare", "--pid", "--fork", "--kill-child", prog("busyleak"))
	target.expectLine(t, "ready")
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", target.cmd.Process.Pid, target.cmd.Process.Pid))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || pid == 0 {
		t.Fatalf("no child of unshare (%q, %v)", kids, err)
	}
	ours, _ := os.Readlink("/proc/self/ns/pid")
	if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); ns == "" || ns == ours {
		t.Fatalf("busyleak (%d) is in the PID namespace %q, the test's", pid, ns)
	}
	checkBurst(t, target, pid)
	if target.stderr.Len() != 0 {
		t.Errorf("busyleak's standard error: %q", target.stderr.String())
	}
}

// checkBurst has busyleak (pid, idle, under target) make its burst under
// --all --inject --backtrace, and checks that it was taken in the middle
// of it and that its 10000 blocks of 4096 bytes are all counted.
func checkBurst(t *testing.T, target *background, pid int) {
	t.Helper()
	m := startAllInject(t, t.TempDir(), "--backtrace", "--format", "json")
	// Past the audit's first moments, in which it reads every process's
	// unwind tables: an injection then takes a few ms, not tens.
	time.Sleep(time.Second)
	io.WriteString(target.stdin, "burst\n")
	target.expectLine(t, "burst")
	taken := waitTaken(t, m, pid, 1)
	out := m.interrupt(t)
	busyExit(t, target)
	var calls int
	if _, err := fmt.Sscanf(taken[1], "called the allocator %d times", &calls); err != nil || calls >= 80000 {
		t.Fatalf("busyleak was not taken during its burst of 80000 calls: %q", taken[1])
	}
	r, ok := lastRow(t, out, pid)
	if !ok {
		t.Fatalf("process %d is not in the last summary:\n%s", pid, out)
	}
	// The blocks may be on more than one site: the probes' walks, made
	// before mdtrace has the process's unwind tables, and the shim's.
	var blocks, bytes int64
	for _, s := range r.Sites {
		if len(s.Frames) > 0 && s.Frames[0].Function == "leak_burst" {
			blocks += s.Blocks
			bytes += s.Bytes
		}
	}
	if blocks != 10000 || bytes != 10000*4096 {
		t.Errorf("leak_burst's sites: %d blocks, %d bytes; want 10000 of 4096 bytes (taken at call %d)", blocks, bytes, calls)
	}
	t.Logf("taken at call %d of the burst's 80000", calls)
}

// takenRe matches the line that says busyleak's process pid got the shim.
func takenRe(pid int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`mdtrace: --inject: process %d \([^)]*/busyleak\) (called the allocator [0-9]+ times|runs a program given the shim before in this audit \(taken after ([0-9]+) calls of the allocator\)): its calls go through mdtrace's shim from now on`, pid))
}

// waitAdopted waits for the line that says process pid, running the
// program name, got the shim at its first run, and returns the blocks the
// shim took over; it stops the test, interrupting m, when none comes
// within 10 s.
func waitAdopted(t *testing.T, m *background, pid int, name string) int {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`mdtrace: --inject: process %d \([^)]*/%s\) called the allocator [0-9]+ times: its calls go through mdtrace's shim from now on, sampled in the process \([0-9]+ GOT slots; ([0-9]+) blocks sampled before taken over\)\n`, pid, name))
	got := waitStderr(m, re, 1)
	if got == nil {
		m.cmd.Process.Signal(syscall.SIGINT)
		m.wait(t)
		t.Fatalf("%s was not given the shim within 10 s:\n%s", name, m.stderr.String())
	}
	n, _ := strconv.Atoi(got[1])
	return n
}

// waitTaken waits for the n-th line that says process pid got the shim,
// and stops the test, interrupting m, when none comes within 10 s.
func waitTaken(t *testing.T, m *background, pid, n int) []string {
	t.Helper()
	got := waitStderr(m, takenRe(pid), n)
	if got == nil {
		m.cmd.Process.Signal(syscall.SIGINT)
		m.wait(t)
		t.Fatalf("busyleak was not given the shim (%d) within 10 s:\n%s", n, m.stderr.String())
	}
	return got
}

// lastRow returns process pid's row in the last summary of out, JSON a
// line (--format json), and whether it has one.
func lastRow(t *testing.T, out []byte, pid int) (auditRow, bool) {
	t.Helper()
	a, _ := lastSummary(t, out)
	i := slices.IndexFunc(a.Ranking, func(r auditRow) bool { return r.PID == pid })
	if i < 0 {
		return auditRow{}, false
	}
	return a.Ranking[i], true
}

// checkLargeSite checks that the largest site of row r is leak_large's
// 2000 blocks of 4096 bytes (always sampled), from main.
func checkLargeSite(t *testing.T, r auditRow) {
	t.Helper()
	if len(r.Sites) == 0 {
		t.Fatalf("process %d has no sites", r.PID)
	}
	top := r.Sites[0]
	frames := top.functions()
	if top.Blocks != 2000 || top.Bytes != 2000*4096 || len(frames) < 2 || frames[0] != "leak_large" || frames[1] != "main" {
		t.Errorf("largest site: %d blocks, %d bytes, frames %q; want leak_large's 2000 blocks, 8192000 bytes, from main", top.Blocks, top.Bytes, frames)
	}
}

// startBusy starts testdata/busyleak with env added, and waits for its
// "ready".
func startBusy(t *testing.T, env ...string) (*background, int) {
	t.Helper()
	target := startEnv(t, env, prog("busyleak"))
	target.expectLine(t, "ready")
	return target, target.cmd.Process.Pid
}

// startAllInject starts `mdtrace --all --inject` with args, and waits
// until it is ready (its ready file in dir).
func startAllInject(t *testing.T, dir string, args ...string) *background {
	t.Helper()
	// The count of calls is set: measured, it depends on the machine.
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--inject-calls") }) {
		args = append([]string{"--inject-calls", "8192"}, args...)
	}
	m := start(t, mdtraceBin, append([]string{"--all", "--inject", "--ready-file", dir + "/ready"}, args...)...)
	waitReady(t, m, dir+"/ready")
	return m
}

// waitStderr waits up to 10 s for n matches of re in m's stderr, and
// returns the submatches of the last, or nil.
func waitStderr(m *background, re *regexp.Regexp, n int) []string {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if all := re.FindAllStringSubmatch(m.stderr.String(), -1); len(all) >= n {
			return all[n-1]
		}
		if time.Now().After(deadline) {
			return nil
		}
	}
}

// busyExit ends busyleak, which must say how many pairs it made and exit 0.
func busyExit(t *testing.T, target *background) {
	t.Helper()
	io.WriteString(target.stdin, "exit\n")
	line, _ := target.stdout.ReadString('\n')
	if code := target.wait(t); code != 0 || !strings.HasPrefix(line, "pairs ") {
		t.Errorf("busyleak exit status %d, output %q; its stderr:\n%s", code, line, target.stderr.String())
	}
}

// TestAllInjectKilled: mdtrace --all --inject is killed with SIGKILL while
// busyleak's calls go through the shim: the shim finds its sites unprobed
// at its next batch of samples and gives the GOT slots back by itself, and
// busyleak goes on to leak and exit normally.
func TestAllInjectKilled(t *testing.T) {
	needRoot(t)
	exe := prog("busyleak")
	target, pid := startBusy(t)
	slots := gotSlots(t, pid, exe)
	before := readSlots(t, pid, slots)
	m := startAllInject(t, t.TempDir())
	waitTaken(t, m, pid, 1)
	m.cmd.Process.Kill()
	<-m.done
	time.Sleep(300 * time.Millisecond)
	slotsBack(t, pid, slots, before, "after mdtrace was killed")
	io.WriteString(target.stdin, "leak\n")
	target.expectLine(t, "leaked")
	// The shim it gave back is started again by the next audit. (Its
	// leaks bound the lazy slot of realloc meanwhile.)
	before = readSlots(t, pid, slots)
	m = startAllInject(t, t.TempDir())
	waitTaken(t, m, pid, 1)
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d", code)
	}
	slotsBack(t, pid, slots, before, "after the second audit")
	busyExit(t, target)
}

// TestAllInjectMeasured: without --inject-calls, the audit measures what
// a probe hit costs here, and what an injection does, on a shell of its
// own that it injects and ends; it takes a process at the count whose hits
// cost it that: it says all three, takes busyleak once it has made that
// many calls, not before, and leaves no shell behind.
func TestAllInjectMeasured(t *testing.T) {
	needRoot(t)
	target, pid := startBusy(t, "BUSYLEAK_IDLE=1")
	m := startAllInject(t, t.TempDir(), "--inject-calls=0")
	// Said after the ready file is written.
	said := waitStderr(m, regexp.MustCompile(`(?m)^mdtrace: --inject: a process gets mdtrace's shim at its ([0-9]+)(?:st|nd|rd|th) call of the allocator \(counted from its exec or the audit's start\), when its probe hits have cost it about what the shim's loading does, ([0-9]+\.[0-9]) ms here, priced on a shell of mdtrace's own until the injections made here say what they cost \(a call's hits cost a process ([0-9]+\.[0-9]) µs here, measured at the start\); the shim samples its calls in the process, and gives them back to the allocator when the audit ends$`), 1)
	if said == nil {
		m.interrupt(t)
		if strings.Contains(m.stderr.String(), "could not be measured (the thread's CPU clock did not advance over a round of calls") {
			t.Skip("this kernel's thread CPU clock counts in ticks: no trap's cost is measured here")
		}
		t.Fatalf("stderr lacks the count measured:\n%s", m.stderr.String())
	}
	count, _ := strconv.Atoi(said[1])
	price, _ := strconv.ParseFloat(said[2], 64)
	cost, _ := strconv.ParseFloat(said[3], 64)
	// The price's hits, within the rounding of the figures said, or a
	// bound.
	lo, hi := (price-0.05)*1000/(cost+0.05), (price+0.05)*1000/(cost-0.05)
	if cost <= 0.05 || price <= 0.05 || !(count == 1024 && lo <= 1024 || count == 65536 && hi >= 65536 ||
		float64(count) >= lo*0.99 && float64(count) <= hi*1.01) {
		t.Errorf("count %d for an injection of %.1f ms and a call's hits of %.1f µs, want about %.0f, from 1024 to 65536", count, price, cost, price*1000/cost)
	}
	if out, err := exec.Command("pgrep", "-f", "-x", "/bin/sh -c echo; read -r line").Output(); err == nil {
		t.Errorf("the shell the injection was priced on is still running: %s", out)
	}
	if count > 3100 {
		// 3000 calls: not yet.
		io.WriteString(target.stdin, "hold\n")
		target.expectLine(t, "held")
		time.Sleep(300 * time.Millisecond)
		if strings.Contains(m.stderr.String(), "its calls go through mdtrace's shim") {
			t.Errorf("busyleak was given the shim before its %dth call:\n%s", count, m.stderr.String())
		}
	}
	io.WriteString(target.stdin, "spin\n")
	target.expectLine(t, "spinning")
	got := waitTaken(t, m, pid, 1)
	var calls int
	if _, err := fmt.Sscanf(got[1], "called the allocator %d times", &calls); err != nil || calls < count {
		t.Errorf("busyleak was taken as %q, want after its %dth call", got[1], count)
	}
	m.interrupt(t)
	busyExit(t, target)
}

// checkTakenCount checks the line at the end of an audit's stderr that
// counts the processes taken. It counts every process taken: others on the
// host (another test's compiler runs) may be among them. Their first runs
// are each said; of the later runs, the test's busyleak made laterRuns or
// more; busyleak was given back, running.
func checkTakenCount(t *testing.T, stderr string, laterRuns int) {
	t.Helper()
	end := regexp.MustCompile(`(?m)^mdtrace: --inject: the shim took the calls of (\d+) processes during the audit \((\d+) of them runs of a program taken before; a process that executes a program anew is taken anew\); (\d+) still running were given back to the allocator$`).FindStringSubmatch(stderr)
	if end == nil {
		t.Fatalf("stderr lacks the count of processes taken:\n%s", stderr)
	}
	total, _ := strconv.Atoi(end[1])
	eager, _ := strconv.Atoi(end[2])
	given, _ := strconv.Atoi(end[3])
	first := len(regexp.MustCompile(`(?m)^mdtrace: --inject: process \d+ \(.*\) called the allocator \d+ times: `).FindAllString(stderr, -1))
	if total-eager != first || first < 1 || eager < laterRuns || given < 1 {
		t.Errorf("%d processes taken, %d of them later runs, %d given back; want %d first runs (those said), %d or more later runs, 1 or more given back:\n%s", total, eager, given, first, laterRuns, stderr)
	}
}
