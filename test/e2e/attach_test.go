//go:build linux

package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// attachToAttachee starts attachee with env added, traces it with
// "mdtrace -p PID -o 'backtrace leak_track'" through its run to its exit,
// and returns its pid, mdtrace's standard error and its leak report.
func attachToAttachee(t *testing.T, env []string) (pid, stderr, report string) {
	t.Helper()
	pid, stderr, log := attachAndRun(t, env, "done", prog("attachee"))
	msgs := logMessages(t, log, pid)
	return pid, stderr, normalizeLeakReport(t, msgs, prog("attachee"))
}

// attachAndRun starts argv with env added, waits for its "ready" line,
// attaches "mdtrace -p PID -o 'backtrace leak_track'", then lets it go
// (a line on its standard input) until it writes done and exits. It
// returns its pid, mdtrace's standard error and log.
func attachAndRun(t *testing.T, env []string, done string, argv ...string) (pid, stderr, log string) {
	t.Helper()
	dir := t.TempDir()
	target := startEnv(t, env, argv[0], argv[1:]...)
	target.expectLine(t, "ready")
	pid = fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "-o", "backtrace leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, done)
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("%s exit status %d", argv[0], code)
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	return pid, m.stderr.String(), readFile(t, dir+"/log")
}

func TestAttach(t *testing.T) {
	needRoot(t)
	_, _, report := attachToAttachee(t, nil)
	golden(t, "attachee_leak_report.txt", report)
}

// TestAttachShimmed attaches to a process that preloads the shim itself:
// mdtrace probes the shim's sites, which the shim calls only once they are
// probed, and the report is the one probes on glibc give.
func TestAttachShimmed(t *testing.T) {
	needRoot(t)
	pid, stderr, report := attachToAttachee(t, []string{"LD_PRELOAD=" + shimBin()})
	shim, _ := filepath.EvalSymlinks(shimBin())
	want := "mdtrace: tracing process " + pid + " (" + prog("attachee") + "): mdshim_site_alloc mdshim_site_free in " + shim + "\n"
	if !strings.Contains(stderr, want) {
		t.Errorf("mdtrace stderr:\n%s\nwant the line:\n%s", stderr, want)
	}
	golden(t, "attachee_leak_report.txt", report)
}

// TestForkFromThread: children forked by a thread other than the main one,
// whose forks ptrace does not report, allocate and end normally though
// they copied their parent's probed sites (the kernel's optimized probes
// call a page that a fork does not copy). With the shim they ask mdtrace
// to follow them and are reported; without it they run untraced.
func TestForkFromThread(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track", "--log", logPath, "--", prog("forkcheck"), "thread")
			if r.code != 0 || r.stdout != "child: exit 7\nchild: exit 7\n" {
				t.Errorf("exit status %d, output:\n%s\nwant two children ending with exit 7; stderr:\n%s", r.code, r.stdout, r.stderr)
			}
			want := 2
			if mode.name == "no-preload" {
				want = 0
			}
			if n := strings.Count(r.stderr, ", forked from "); n != want {
				t.Errorf("%d children traced, want %d; stderr:\n%s", n, want, r.stderr)
			}
			log := readFile(t, logPath)
			if n := strings.Count(log, "leaked block of size 777 "); n != want {
				t.Errorf("%d leaks of 777 bytes reported, want %d", n, want)
			}
			if n := strings.Count(log, "(child_work+"); n != want {
				t.Errorf("%d leaks from child_work, want %d", n, want)
			}
		})
	}
}

// TestAttachShimmedForks: a process with the shim, attached without
// --follow-forks, forks children while mdtrace traces it and after it has
// gone: each allocates and ends normally.
func TestAttachShimmedForks(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := startEnv(t, []string{"LD_PRELOAD=" + shimBin()}, prog("forkcheck"), "wait")
	target.expectLine(t, "ready")
	pid := fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "--backtrace", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	for range 3 {
		io.WriteString(target.stdin, "fork\n")
		target.expectLine(t, "child: exit 7")
	}
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	io.WriteString(target.stdin, "fork\n")
	target.expectLine(t, "child: exit 7")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("forkcheck exit status %d", code)
	}
}

func TestAttachInterrupted(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := start(t, prog("attachee"))
	target.expectLine(t, "ready")
	pid := fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "--leak-track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	// The report is written at the interrupt; the process runs on, untraced.
	msgs := logMessages(t, readFile(t, dir+"/log"), pid)
	want := "+++ testdata/attachee leaked block of size 3003 at 0xPTR (leak 1 of 3)\n" +
		"+++ testdata/attachee leaked block of size 3002 at 0xPTR (leak 2 of 3)\n" +
		"+++ testdata/attachee leaked block of size 3001 at 0xPTR (leak 3 of 3)\n" +
		"mdtrace: 9006 bytes in 3 leaked allocations\n"
	if got := normalizeLeakReport(t, msgs, prog("attachee")); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
	status := readFile(t, "/proc/"+pid+"/status")
	if !strings.Contains(status, "TracerPid:\t0\n") {
		t.Errorf("the process is still traced after mdtrace exited")
	}
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("attachee exit status %d after the detach", code)
	}
}

func TestExecReplacesTheProgram(t *testing.T) {
	needRoot(t)
	// The shell's blocks die with its image; leaky's are reported under
	// leaky's name.
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track", "--log", logPath, "--", "sh", "-c", "exec "+prog("leaky")+" 5")
			if r.code != 5 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			msgs := logMessages(t, readFile(t, logPath), "")
			golden(t, "leaky_leak_report.txt", normalizeLeakReport(t, msgs, prog("leaky")))
		})
	}
}

// TestBacktraceAloneShowsLive: the headline command, "mdtrace -p PID
// --backtrace", says what it saw when it stops: the blocks allocated since
// it attached and still live, by backtrace, most bytes first, each frame
// named, and a bottom line.
func TestBacktraceAloneShowsLive(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := start(t, prog("attachee"))
	target.expectLine(t, "ready")
	pid := fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "--backtrace", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	var got []string
	for _, l := range strings.Split(m.stderr.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "mdtrace: tracing process "), l == "":
		case strings.HasPrefix(l, "          #"):
			// The frames in attachee, by function.
			if f := frameRe.FindStringSubmatch(l); f != nil && f[3] == prog("attachee") {
				got = append(got, "  "+f[4])
			}
		default:
			got = append(got, l)
		}
	}
	want := []string{
		"mdtrace: process " + pid + " (" + prog("attachee") + "): blocks live since tracing began, the 3 backtraces with the most bytes of 3:",
		"3003 bytes in 1 allocations:", "  attach_leak_three", "  main", "  _start",
		"3002 bytes in 1 allocations:", "  attach_leak_two", "  main", "  _start",
		"3001 bytes in 1 allocations:", "  attach_leak_one", "  main", "  _start",
		"mdtrace: process " + pid + " (" + prog("attachee") + "): 9006 bytes in 3 allocations live since tracing began",
	}
	if !slices.Equal(got, want) {
		t.Errorf("stderr:\n%s\nwant:\n%s\nall of it:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), m.stderr.String())
	}
}

// tracerPID returns the TracerPid of /proc/PID/status.
func tracerPID(t *testing.T, pid string) string {
	t.Helper()
	for _, l := range strings.Split(readFile(t, "/proc/"+pid+"/status"), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:\t"); ok {
			return v
		}
	}
	t.Fatalf("/proc/%s/status has no TracerPid", pid)
	return ""
}

// TestAttachUnheld: "mdtrace -p" holds no ptrace on the process, so gdb
// and strace attach beside it, and still writes the reports of its exit
// as when it held it there: the leak report of TestAttach, a heap dump
// whose maps are the process's as it ended, and how it ended.
func TestAttachUnheld(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target, m, pid := attachDumping(t, dir)
	if tp := tracerPID(t, pid); tp != "0" {
		t.Errorf("TracerPid %s while mdtrace traces the process, want 0", tp)
	}
	if _, err := exec.LookPath("gdb"); err == nil {
		out, err := exec.Command("gdb", "-batch", "-nx", "-p", pid, "-ex", "info inferiors").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "process "+pid) {
			t.Errorf("gdb -p %s beside mdtrace: %v; output:\n%s", pid, err, out)
		}
	} else {
		t.Logf("gdb is not installed: only strace attaches beside mdtrace")
	}
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skipf("strace is not installed: %v", err)
	}
	strace := start(t, "strace", "-o", dir+"/strace", "-e", "trace=write", "-p", pid)
	for i := 0; tracerPID(t, pid) != fmt.Sprint(strace.cmd.Process.Pid); i++ {
		if i == 100 {
			t.Fatalf("strace did not attach beside mdtrace; its stderr:\n%s", strace.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	maps := readFile(t, "/proc/"+pid+"/maps")
	// mdtrace reads the maps of a process it does not hold every second
	// (and at each change of its libraries): the first allocation probed
	// mapped the kernel's [uprobes] page since the attach.
	time.Sleep(1500 * time.Millisecond)
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("attachee exit status %d", code)
	}
	if code := strace.wait(t); code != 0 {
		t.Errorf("strace exit status %d; stderr:\n%s", code, strace.stderr.String())
	}
	trace := readFile(t, dir+"/strace")
	if !strings.Contains(trace, "write(1, \"done\\n\", 5) ") || !strings.HasSuffix(trace, "+++ exited with 0 +++\n") {
		t.Errorf("strace's trace:\n%s\nwant the write of done and the exit", trace)
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	if want := "mdtrace: process " + pid + " (" + prog("attachee") + ") exited with status 0\n"; !strings.HasSuffix(m.stderr.String(), want) ||
		strings.Contains(m.stderr.String(), "holding") {
		t.Errorf("mdtrace stderr:\n%s\nwant no hold, and the end:\n%s", m.stderr.String(), want)
	}
	var msgs []string
	for _, l := range logMessages(t, readFile(t, dir+"/log"), pid) {
		if !strings.HasPrefix(l, "Dumping to file: ") {
			msgs = append(msgs, l)
		}
	}
	golden(t, "attachee_leak_report.txt", normalizeLeakReport(t, msgs, prog("attachee")))
	if got := dumpMaps(t, dir+"/heap."+pid+".exit.txt"); got != maps {
		t.Errorf("heap dump maps:\n%s\nwant the process's as it ended:\n%s", got, maps)
	}
}

// attachDumping starts attachee with args and, once it is ready, mdtrace -p
// on it, leaks tracked and a heap dump at its exit, the log and the dump in
// dir; it returns both and attachee's pid.
func attachDumping(t *testing.T, dir string, args ...string) (target, m *background, pid string) {
	t.Helper()
	target = start(t, prog("attachee"), args...)
	target.expectLine(t, "ready")
	pid = fmt.Sprint(target.cmd.Process.Pid)
	m = start(t, mdtraceBin, "-p", pid, "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/heap",
		"--log", dir+"/log", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	return target, m, pid
}

// dumpMaps returns the MAPS section of the heap dump at path.
func dumpMaps(t *testing.T, path string) string {
	t.Helper()
	dump := readFile(t, path)
	i, j := strings.Index(dump, "\nMAPS\n"), strings.LastIndex(dump, "END\n")
	if i < 0 || j < i {
		t.Fatalf("heap dump without its MAPS section:\n%s", dump)
	}
	return dump[i+len("\nMAPS\n") : j]
}

// TestAttachUnheldLeaderExits: a process mdtrace does not hold whose main
// thread ends before the others shows no maps from then on; the heap dump
// of its exit lists those it had, read before, not none.
func TestAttachUnheldLeaderExits(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target, m, pid := attachDumping(t, dir, "leader-exit")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	maps := readFile(t, "/proc/"+pid+"/maps")
	// Read again by mdtrace since the first allocation probed mapped
	// the kernel's [uprobes] page.
	time.Sleep(1500 * time.Millisecond)
	io.WriteString(target.stdin, "end\n")
	waitLeaderGone(t, pid)
	if got := readFile(t, "/proc/"+pid+"/maps"); got != "" {
		t.Fatalf("/proc/%s/maps with the main thread gone:\n%s\nwant none", pid, got)
	}
	// mdtrace reads the maps again meanwhile, and finds none.
	time.Sleep(1500 * time.Millisecond)
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("attachee exit status %d", code)
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	if want := "mdtrace: process " + pid + " (" + prog("attachee") + ") exited with status 0\n"; !strings.HasSuffix(m.stderr.String(), want) {
		t.Errorf("mdtrace stderr:\n%s\nwant the end:\n%s", m.stderr.String(), want)
	}
	if got := dumpMaps(t, dir+"/heap."+pid+".exit.txt"); got != maps {
		t.Errorf("heap dump maps:\n%s\nwant those before the main thread ended:\n%s", got, maps)
	}
}

// TestAttachMdtraceKilled: an attached process runs on normally, untraced,
// when mdtrace is killed (SIGKILL), whether mdtrace held it or not.
func TestAttachMdtraceKilled(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct{ name, flag string }{{"unheld", "--leak-track"}, {"held", "--follow-forks"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			target := start(t, prog("attachee"))
			target.expectLine(t, "ready")
			pid := fmt.Sprint(target.cmd.Process.Pid)
			m := start(t, mdtraceBin, "-p", pid, tc.flag, "--ready-file", dir+"/ready")
			waitReady(t, m, dir+"/ready")
			// The tracer is a thread of mdtrace.
			tp := tracerPID(t, pid)
			_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%s", m.cmd.Process.Pid, tp))
			if held := tp != "0" && err == nil; held != (tc.name == "held") {
				t.Errorf("TracerPid %s with %s (mdtrace is %d)", tp, tc.flag, m.cmd.Process.Pid)
			}
			m.cmd.Process.Kill()
			m.wait(t)
			if tp := tracerPID(t, pid); tp != "0" {
				t.Errorf("TracerPid %s once mdtrace was killed", tp)
			}
			io.WriteString(target.stdin, "go\n")
			target.expectLine(t, "done")
			target.stdin.Close()
			if code := target.wait(t); code != 0 {
				t.Errorf("attachee exit status %d after mdtrace was killed", code)
			}
		})
	}
}

// TestAttachUnheldExec: a process mdtrace does not hold that executes a
// program is followed into it, later than a held one (--hold) would be,
// which mdtrace says: the new program's leaks are reported under its name.
func TestAttachUnheldExec(t *testing.T) {
	needRoot(t)
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			dir := t.TempDir()
			leaky := prog("leaky")
			target := start(t, "sh", "-c", "echo ready; read x; exec "+leaky+" hold")
			target.expectLine(t, "ready")
			pid := fmt.Sprint(target.cmd.Process.Pid)
			args := []string{"-p", pid, "-o", "backtrace leak_track", "--log", dir + "/log", "--ready-file", dir + "/ready"}
			if hold {
				args = append(args, "--hold")
			}
			m := start(t, mdtraceBin, args...)
			waitReady(t, m, dir+"/ready")
			io.WriteString(target.stdin, "go\n")
			target.expectLine(t, "leaky: done")
			// Long enough for mdtrace to see the exec as leaky runs.
			time.Sleep(300 * time.Millisecond)
			target.stdin.Close()
			if code := target.wait(t); code != 0 {
				t.Errorf("exit status %d", code)
			}
			if code := m.wait(t); code != 0 {
				t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			stderr := m.stderr.String()
			late := "mdtrace: process " + pid + " executed " + leaky + ", and mdtrace, which does not hold it (--hold would), learned of it as it ran: " +
				"until then, its backtraces may end early (its files' unwind tables were not loaded yet), and the calls to an allocator of its own were missed\n"
			held := "mdtrace: holding process " + pid + " with ptrace for --hold: debuggers and profilers cannot attach to it while mdtrace runs\n"
			if strings.Contains(stderr, late) == hold || strings.Contains(stderr, held) != hold {
				t.Errorf("mdtrace stderr:\n%s\nwant the line %q: %v, and %q: %v", stderr, late, !hold, held, hold)
			}
			for _, want := range []string{"mdtrace: 16194 bytes in 13 leaked allocations\n", "mdtrace: process " + pid + " (" + leaky + ") exited with status 0\n"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("mdtrace stderr:\n%s\nwant the line %q", stderr, want)
				}
			}
		})
	}
}

// TestAttachBesideTracer: mdtrace -p traces a process that strace traces
// already; held (--hold), it cannot, and says why.
func TestAttachBesideTracer(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skipf("strace is not installed: %v", err)
	}
	dir := t.TempDir()
	target := start(t, prog("attachee"))
	target.expectLine(t, "ready")
	pid := fmt.Sprint(target.cmd.Process.Pid)
	strace := start(t, "strace", "-o", dir+"/strace", "-e", "trace=write", "-p", pid)
	for i := 0; tracerPID(t, pid) != fmt.Sprint(strace.cmd.Process.Pid); i++ {
		if i == 100 {
			t.Fatalf("strace did not attach; its stderr:\n%s", strace.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := runMdtrace(t, "-p", pid, "--hold", "--leak-track")
	want := "mdtrace: holding process " + pid + " with ptrace for --hold: debuggers and profilers cannot attach to it while mdtrace runs\n" +
		"mdtrace: not permitted to trace process " + pid + ": it is traced by another debugger, or ptrace is restricted (needs CAP_SYS_PTRACE)\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("--hold beside strace: exit status %d, stderr:\n%s\nwant 1 and:\n%s", r.code, r.stderr, want)
	}
	m := start(t, mdtraceBin, "-p", pid, "--leak-track", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("attachee exit status %d", code)
	}
	strace.wait(t)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	for _, want := range []string{"mdtrace: 9006 bytes in 3 leaked allocations\n", "mdtrace: process " + pid + " (" + prog("attachee") + ") exited with status 0\n"} {
		if !strings.Contains(m.stderr.String(), want) {
			t.Errorf("mdtrace stderr:\n%s\nwant the line %q", m.stderr.String(), want)
		}
	}
}
