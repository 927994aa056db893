//go:build linux

package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// mdtraceBin is the mdtrace binary under test, built once by TestMain.
var mdtraceBin string

// testdataDir holds the C test programs, built once by TestMain.
var testdataDir string

func TestMain(m *testing.M) {
	flag.Parse()
	// MDTRACE_BIN names a folder with mdtrace and libmdshim.so built
	// already (make build's bin/), as the kernel matrix runs this test
	// binary under other kernels, where nothing is built.
	if bin := os.Getenv("MDTRACE_BIN"); bin != "" {
		mdtraceBin, _ = filepath.Abs(filepath.Join(bin, "mdtrace"))
		testdataDir, _ = filepath.Abs("../../testdata")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "mdtrace-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Other users run it too (TestNotRoot).
	os.Chmod(dir, 0o755)
	mdtraceBin = filepath.Join(dir, "mdtrace")
	build := exec.Command("go", "build", "-o", mdtraceBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building mdtrace: %v\n%s", err, out)
		os.Exit(1)
	}
	// The shim goes next to mdtrace, as make build puts it, where
	// launched commands get it preloaded.
	if out, err := exec.Command("make", "-s", "-C", "../..", "bin/libmdshim.so").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the shim: %v\n%s", err, out)
		os.Exit(1)
	}
	if err := copyFile("../../bin/libmdshim.so", filepath.Join(dir, "libmdshim.so")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testdataDir, _ = filepath.Abs("../../testdata")
	if out, err := exec.Command("make", "-s", "-C", testdataDir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test programs: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// shimBin is the shim next to mdtraceBin.
func shimBin() string { return filepath.Join(filepath.Dir(mdtraceBin), "libmdshim.so") }

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

// needRoot skips a test that loads BPF programs when it cannot, and says why.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE) to load BPF programs and attach uprobes")
	}
}

func prog(name string) string { return filepath.Join(testdataDir, name) }

// result is what one run of mdtrace did.
type result struct {
	code           int
	stdout, stderr string
}

// runMdtrace runs mdtrace to completion with a timeout.
func runMdtrace(t *testing.T, args ...string) result {
	t.Helper()
	return runMdtraceEnv(t, nil, args...)
}

// runMdtraceEnv is runMdtrace with env added to mdtrace's environment,
// which a command it launches inherits.
func runMdtraceEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(mdtraceBin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("mdtrace %v hung; stderr:\n%s", args, errb.String())
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// logRe splits a logcat threadtime line into its header and message.
var logRe = regexp.MustCompile(`^\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} +(\d+) +(\d+) ([EI]) malloc_debug: (.*)$`)

// logMessages returns the messages of a malloc_debug log, checking that
// every line has the logcat header with the given pid.
func logMessages(t *testing.T, log string, pid string) []string {
	t.Helper()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		if line == "" {
			continue
		}
		m := logRe.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("not a malloc_debug log line: %q", line)
			continue
		}
		if pid != "" && (m[1] != pid || m[2] != pid) {
			t.Errorf("log line for pid %s/%s, want %s: %q", m[1], m[2], pid, line)
		}
		msgs = append(msgs, m[4])
	}
	return msgs
}

var (
	ptrRe   = regexp.MustCompile(`at 0x[0-9a-f]+ \(leak`)
	frameRe = regexp.MustCompile(`^          #(\d\d)  pc ([0-9a-f]{16})  (\S+)(?: \((.+)\+(\d+)\))?$`)
)

// normalizeLeakReport keeps the leak report's lines whole, but for the
// pointers and, in frames, the pc and offset, which depend on the compiler
// and on address randomization; frames outside the test program (libc's,
// whose names depend on the distribution) are dropped.
func normalizeLeakReport(t *testing.T, msgs []string, progPath string) string {
	t.Helper()
	var b strings.Builder
	for _, m := range msgs {
		if fm := frameRe.FindStringSubmatch(m); fm != nil {
			if fm[3] != progPath {
				continue
			}
			fmt.Fprintf(&b, "          #%s  pc PC  %s (%s+OFF)\n", fm[1], filepath.Base(fm[3]), fm[4])
			continue
		}
		m = ptrRe.ReplaceAllString(m, "at 0xPTR (leak")
		fmt.Fprintln(&b, strings.ReplaceAll(m, testdataDir+"/", "testdata/"))
	}
	return b.String()
}

// golden compares got with testdata/golden/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(testdataDir, "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// launchModes are the two ways a launched command is traced: at the
// shim's probe sites (the default) and with probes on glibc's allocator.
var launchModes = []struct {
	name  string
	flag  string // the flag that selects the mode
	probe string // the end of mdtrace's "tracing process" line
}{
	{"sites", "--shim=", "mdshim_site_alloc mdshim_site_free mdshim_site_batch in "},
	{"no-preload", "--no-preload", "malloc free calloc realloc reallocarray posix_memalign memalign aligned_alloc valloc pvalloc in /"},
	{"no-batch", "--no-batch", "mdshim_site_alloc mdshim_site_free in "},
}

// modeFlag is the flag of a launch mode.
func modeFlag(flag string) string {
	if flag == "--shim=" {
		return flag + shimBin()
	}
	return flag
}

// TestHandoffLeaks: blocks passed between threads, which each hand their
// calls over a batch at a time in the default mode, and a process that
// ends while its threads' batches hold calls, with exit and with _exit, or
// forks a child then, which ends at once.
// Every mode reports the same leaks of the program's own.
func TestHandoffLeaks(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		for _, end := range []string{"exit", "_exit", "fork"} {
			t.Run(mode.name+"/"+end, func(t *testing.T) {
				dir := t.TempDir()
				logPath := filepath.Join(dir, "log")
				r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/heap",
					"--log", logPath, "--", prog("handoff"), "10000", "3", "2", "4", end)
				if r.code != 0 || r.stdout != "handoff 10000 3 2 4\n" {
					t.Fatalf("exit status %d, output %q; stderr:\n%s", r.code, r.stdout, r.stderr)
				}
				// With fork, the child's report too: its copy of the
				// parent's blocks, and of the other threads' last calls.
				procs := 1
				if end == "fork" {
					procs = 2
				}
				if want := "mdtrace: tracing process "; !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "\n") != procs {
					t.Errorf("stderr, want only the tracing lines:\n%s", r.stderr)
				}
				log := readFile(t, logPath)
				for _, want := range []struct {
					what string
					n    int
				}{{"leaked block of size 4000 ", 12}, {"leaked block of size 3000 ", 2}, {"(handoff_keep+", 12}, {"(handoff_main+", 2}, {"(handoff_make+", 0}, {"(handoff_churn+", 0}} {
					if n := strings.Count(log, want.what); n != procs*want.n {
						t.Errorf("%d lines with %q, want %d", n, want.what, procs*want.n)
					}
				}
				// The kept blocks were allocated before any fork: in the
				// child's heap dump too they are not a zygote child's (z 0),
				// whether its parent's table or its copy of a thread's batch
				// brought them.
				dumps, _ := filepath.Glob(dir + "/heap.*.exit.txt")
				if len(dumps) != procs {
					t.Fatalf("heap dumps %v, want %d", dumps, procs)
				}
				for _, d := range dumps {
					for line := range strings.SplitSeq(readFile(t, d), "\n") {
						if f := strings.Fields(line); len(f) > 3 && f[0] == "z" && f[2] == "sz" && f[3] == "4000" && f[1] != "0" {
							t.Errorf("%s: %q: a block kept before the fork, marked as the zygote child's", d, line)
						}
					}
				}
			})
		}
	}
}

// TestLaunchLeakReport gives the same report, byte for byte, in both launch
// modes: every kind of allocation function, a failed realloc and
// reallocarray, and a leak made by a constructor before main.
func TestLaunchLeakReport(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "log")
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track", "--log", logPath, "--", prog("leaky"), "3")
			if r.code != 3 {
				t.Fatalf("exit status %d, want the command's 3; stderr:\n%s", r.code, r.stderr)
			}
			if r.stdout != "leaky: done\n" {
				t.Errorf("the command's output = %q", r.stdout)
			}
			if !strings.Contains(r.stderr, mode.probe) {
				t.Errorf("stderr lacks %q:\n%s", mode.probe, r.stderr)
			}
			log, _ := os.ReadFile(logPath)
			msgs := logMessages(t, string(log), "")
			golden(t, "leaky_leak_report.txt", normalizeLeakReport(t, msgs, prog("leaky")))
			// Every leak has its backtrace, the leaking function first, then main.
			if n := strings.Count(string(log), "Backtrace at time of allocation:"); n != 13 {
				t.Errorf("%d backtraces, want 13", n)
			}
		})
	}
}

func TestLeakTrackWithoutBacktrace(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "--leak-track", "--log", logPath, "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	log, _ := os.ReadFile(logPath)
	msgs := logMessages(t, string(log), "")
	got := normalizeLeakReport(t, msgs, prog("leaky"))
	want := ""
	for i, size := range []int{4096, 1024, 1013, 1012, 1011, 1009, 1008, 1006, 1005, 1004, 1003, 1002, 1001} {
		want += fmt.Sprintf("+++ testdata/leaky leaked block of size %d at 0xPTR (leak %d of 13)\n", size, i+1)
	}
	if got != want {
		t.Errorf("leak report:\n%s\nwant:\n%s", got, want)
	}
}

func TestBacktraceSizeFilter(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "-o", "bt leak_track bt_min_sz=1005 bt_max_sz=1010", "--log", logPath, "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	log, _ := os.ReadFile(logPath)
	msgs := logMessages(t, string(log), "")
	// Only sizes 1005..1010 have a backtrace; all 12 leaks are reported.
	var withBT []string
	for i, m := range msgs {
		if m == "Backtrace at time of allocation:" {
			withBT = append(withBT, strings.Fields(msgs[i-1])[6])
		}
	}
	if got := strings.Join(withBT, " "); got != "1009 1008 1006 1005" {
		t.Errorf("sizes with a backtrace: %s, want 1009 1008 1006 1005", got)
	}
	if n := strings.Count(string(log), "leaked block"); n != 13 {
		t.Errorf("%d leaks, want 13", n)
	}
}

// heapDumpFunctions symbolizes the first frame of each record of a heap
// dump with the dump's own MAPS section, as a developer would offline.
func heapDumpFunctions(t *testing.T, d *output.ParsedHeapDump) []string {
	t.Helper()
	maps, err := stacks.ParseMaps([]byte(d.Maps))
	if err != nil {
		t.Fatalf("the dump's maps: %v", err)
	}
	sym := stacks.NewSymbolizer()
	var out []string
	for _, r := range d.Records {
		if len(r.Frames) == 0 {
			out = append(out, "")
			continue
		}
		fr := sym.Symbolize(0, maps, r.Frames[:1])
		out = append(out, fr[0].Func)
	}
	return out
}

var dumpRecordRe = regexp.MustCompile(`^z 0  sz +(\d+)  num    1  bt( [0-9a-f]+)+$`)

func TestHeapDumpOnExit(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	r := runMdtrace(t, "-o", "backtrace backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h", "--ready-file", dir+"/ready", "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	path := fmt.Sprintf("%s/h.%s.exit.txt", dir, pid)
	data := readFile(t, path)
	checkHeapDump(t, data, prog("leaky"))
	// The log names the file as Android does.
	if !strings.Contains(r.stderr, "E malloc_debug: Dumping to file: "+path+"\n") {
		t.Errorf("no 'Dumping to file' line in:\n%s", r.stderr)
	}
}

// checkHeapDump checks a heap dump of leaky byte for byte, with frames and
// maps normalized.
func checkHeapDump(t *testing.T, data, progPath string) {
	t.Helper()
	lines := strings.Split(data, "\n")
	head := strings.Join(lines[:8], "\n")
	wantHead := fmt.Sprintf("Android Native Heap Dump v1.2\n\nBuild fingerprint: '%s'\n\nTotal memory: %d\nAllocation records: 13\nBacktrace size: 16\n\n",
		output.BuildFingerprint(), 4096+1024+1013+1012+1011+1009+1008+1006+1005+1004+1003+1002+1001)
	if head != strings.TrimSuffix(wantHead, "\n") {
		t.Errorf("header:\n%s\nwant:\n%s", head, wantHead)
	}
	var sizes []string
	for _, l := range lines[8:21] {
		m := dumpRecordRe.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("record line %q", l)
			continue
		}
		sizes = append(sizes, m[1])
	}
	if got := strings.Join(sizes, " "); got != "4096 1024 1013 1012 1011 1009 1008 1006 1005 1004 1003 1002 1001" {
		t.Errorf("record sizes %s", got)
	}
	if lines[21] != "MAPS" || lines[len(lines)-2] != "END" || lines[len(lines)-1] != "" {
		t.Errorf("maps section: %q ... %q", lines[21], lines[len(lines)-2:])
	}
	if !strings.Contains(data, " "+progPath+"\n") {
		t.Errorf("the maps do not list %s", progPath)
	}
	d, err := output.ParseHeapDump(strings.NewReader(data))
	if err != nil {
		t.Fatalf("ParseHeapDump: %v", err)
	}
	got := strings.Join(heapDumpFunctions(t, d), " ")
	want := "leak_pvalloc leak_aligned_alloc leak_in_constructor leak_failed_realloc leak_failed_reallocarray leak_valloc leak_posix_memalign leak_memalign leak_reallocarray leak_realloc_grow leak_realloc_new leak_calloc leak_malloc"
	if got != want {
		t.Errorf("first frames:\n got %s\nwant %s", got, want)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFile waits for a file to exist.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

// background is a process started by a test and waited for later.
type background struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
	done   chan struct{}
}

func start(t *testing.T, name string, args ...string) *background {
	t.Helper()
	return startEnv(t, nil, name, args...)
}

// startEnv is start with env added to mdtrace's environment.
func startEnv(t *testing.T, env []string, name string, args ...string) *background {
	t.Helper()
	b := &background{cmd: exec.Command(name, args...), done: make(chan struct{})}
	if env != nil {
		b.cmd.Env = append(os.Environ(), env...)
	}
	b.stdin, _ = b.cmd.StdinPipe()
	out, _ := b.cmd.StdoutPipe()
	b.stdout = bufio.NewReader(out)
	b.cmd.Stderr = &b.stderr
	// A command mdtrace leaves running keeps the output pipes open.
	b.cmd.WaitDelay = 2 * time.Second
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
	})
	go func() { b.cmd.Wait(); close(b.done) }()
	return b
}

func (b *background) expectLine(t *testing.T, want string) {
	t.Helper()
	line, err := b.stdout.ReadString('\n')
	if line != want+"\n" {
		t.Fatalf("read %q (%v), want %q; stderr:\n%s", line, err, want, b.stderr.String())
	}
}

func (b *background) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s hung; stderr:\n%s", b.cmd.Path, b.stderr.String())
	}
	return b.cmd.ProcessState.ExitCode()
}

func TestSignal47WritesHeapDump(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "-o", "backtrace backtrace_dump_prefix="+dir+"/h", "--ready-file", dir+"/ready", "--", prog("leaky"), "hold")
	m.expectLine(t, "leaky: done")
	waitFile(t, dir+"/ready")
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	m.cmd.Process.Signal(syscall.Signal(47))
	path := fmt.Sprintf("%s/h.%s.txt", dir, pid)
	waitFile(t, path)
	checkHeapDump(t, readFile(t, path), prog("leaky"))
	m.stdin.Close()
	if code := m.wait(t); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	if _, err := os.Stat(fmt.Sprintf("%s/h.%s.exit.txt", dir, pid)); err == nil {
		t.Error("an exit dump was written without backtrace_dump_on_exit")
	}
}

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
		"+++ testdata/attachee leaked block of size 3001 at 0xPTR (leak 3 of 3)\n"
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

func TestLaunchTerminated(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--leak-track", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("leaky"), "hold")
	m.expectLine(t, "leaky: done")
	waitFile(t, dir+"/ready")
	child := strings.TrimSpace(readFile(t, dir+"/ready"))
	m.cmd.Process.Signal(syscall.SIGTERM)
	if code := m.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want 143; stderr:\n%s", code, m.stderr.String())
	}
	if n := strings.Count(readFile(t, dir+"/log"), "leaked block"); n != 13 {
		t.Errorf("%d leaks reported at SIGTERM, want 13", n)
	}
	// The command was left running, untraced; it exits when its input closes.
	status := readFile(t, "/proc/"+child+"/status")
	if !strings.Contains(status, "TracerPid:\t0\n") {
		t.Errorf("the command is still traced after mdtrace exited:\n%s", status)
	}
	m.stdin.Close()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat("/proc/" + child); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("the command %s did not exit when its input closed", child)
}

func TestExitStatus(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		arg  string
		code int
	}{{"0", 0}, {"7", 7}, {"abort", 128 + int(syscall.SIGABRT)}} {
		r := runMdtrace(t, "--leak-track", "--log", "/dev/null", "--", prog("leaky"), tc.arg)
		if r.code != tc.code {
			t.Errorf("leaky %s: exit status %d, want %d; stderr:\n%s", tc.arg, r.code, tc.code, r.stderr)
		}
	}
	// A device given as the log is written to, never replaced.
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("/dev/null is no longer a device: %v %v", fi.Mode(), err)
	}
}

// zombie returns the PID of a process that has exited and not been reaped.
func zombie(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Wait() })
	for i := 0; i < 100; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if strings.Contains(string(b), ") Z ") {
			return cmd.Process.Pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no zombie")
	return 0
}

// i386Program writes a minimal 32-bit x86 program that exits at once.
func i386Program(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	// ELF header.
	b.Write([]byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	le := func(v any) { binaryWrite(&b, v) }
	le(uint16(elf.ET_EXEC))
	le(uint16(elf.EM_386))
	le(uint32(1))          // version
	le(uint32(0x08048054)) // entry
	le(uint32(52))         // phoff
	le(uint32(0))          // shoff
	le(uint32(0))          // flags
	le(uint16(52))         // ehsize
	le(uint16(32))         // phentsize
	le(uint16(1))          // phnum
	le(uint16(0))          // shentsize
	le(uint16(0))          // shnum
	le(uint16(0))          // shstrndx
	// One PT_LOAD of the whole file.
	le(uint32(elf.PT_LOAD))
	le(uint32(0))
	le(uint32(0x08048000))
	le(uint32(0x08048000))
	le(uint32(84 + 12))
	le(uint32(84 + 12))
	le(uint32(elf.PF_R | elf.PF_X))
	le(uint32(0x1000))
	// exit(0): mov eax,1; xor ebx,ebx; int 0x80
	b.Write([]byte{0xb8, 1, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80, 0x90, 0x90, 0x90})
	path := filepath.Join(t.TempDir(), "prog32")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func binaryWrite(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case uint16:
		b.Write([]byte{byte(x), byte(x >> 8)})
	case uint32:
		b.Write([]byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)})
	}
}

func TestBadInput(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	z := zombie(t)
	prog32 := i386Program(t)
	type badCase struct {
		name   string
		args   []string
		code   int
		stderr string // the whole of standard error
	}
	cases := []badCase{
		{"unknown pid", []string{"-p", "2147483000"}, 1, "mdtrace: no process with PID 2147483000\n"},
		{"negative pid", []string{"-p", "-5"}, 2, "mdtrace: invalid PID -5\nRun 'mdtrace --help' for usage.\n"},
		{"not a number", []string{"-p", "abc"}, 2, "mdtrace: invalid argument \"abc\" for \"-p, --pid\" flag: strconv.ParseInt: parsing \"abc\": invalid syntax\nRun 'mdtrace --help' for usage.\n"},
		{"exited process", []string{"-p", fmt.Sprint(z)}, 1, fmt.Sprintf("mdtrace: process %d: the process exited\n", z)},
		{"nothing to trace", nil, 2, "mdtrace: nothing to trace: give -p PID, --program NAME or a command after --\nRun 'mdtrace --help' for usage.\n"},
		{"pid and command", []string{"-p", "1", "--", "true"}, 2, "mdtrace: give either -p PID or a command, not both\nRun 'mdtrace --help' for usage.\n"},
		{"unknown flag", []string{"--frobnicate", "--", "true"}, 2, "mdtrace: unknown flag: --frobnicate\nRun 'mdtrace --help' for usage.\n"},
		{"bad option value", []string{"-o", "backtrace=XXX", "--", "true"}, 2,
			"mdtrace: bad value for option 'backtrace'\nmdtrace: For malloc debug option descriptions go to:\nmdtrace:   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md\n"},
		{"option out of range", []string{"-o", "backtrace=300", "--", "true"}, 2,
			"mdtrace: bad value for option 'backtrace', value must be <= 256: 300\nmdtrace: For malloc debug option descriptions go to:\nmdtrace:   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md\n"},
		{"unknown option", []string{"-o", "backtrace unknown_option", "--", "true"}, 2,
			"mdtrace: unknown option unknown_option\nmdtrace: For malloc debug option descriptions go to:\nmdtrace:   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md\n"},
		{"flag option value", []string{"--leak-track=12", "--", "true"}, 2, "mdtrace: value set for option 'leak_track' which does not take a value\nRun 'mdtrace --help' for usage.\n"},
		{"option not supported yet", []string{"-o", "backtrace check_unreachable_on_signal", "--", "true"}, 2, "mdtrace: option check_unreachable_on_signal is not supported yet\n"},
		{"shim option with -p", []string{"-p", "1", "-o", "guard"}, 2, "mdtrace: option guard rewrites memory through the preloaded shim: it needs a command launched by mdtrace, not -p\n"},
		{"command not found", []string{"--", dir + "/nonexistent"}, 127, "mdtrace: cannot run " + dir + "/nonexistent: exec: \"" + dir + "/nonexistent\": stat " + dir + "/nonexistent: no such file or directory\n"},
		{"no malloc", []string{"--", mdtraceBin, "--version"}, 1, "mdtrace: " + mdtraceBin + ": neither it nor its libraries define malloc: no malloc to trace\n"},
		{"32-bit program", []string{"--", prog32}, 1, "mdtrace: cannot trace " + prog32 + ": not a 64-bit x86-64 program\n"},
		{"no-preload with a shim option", []string{"--no-preload", "-o", "guard", "--", "true"}, 2, "mdtrace: option guard rewrites memory through the preloaded shim, which --no-preload turns off\n"},
		{"follow-forks without -p", []string{"--follow-forks", "--", "true"}, 2, "mdtrace: --follow-forks is for -p: a launched command's children are always traced\nRun 'mdtrace --help' for usage.\n"},
		{"no-preload with -p", []string{"--no-preload", "-p", "1"}, 2, "mdtrace: --no-preload is for launched commands; with -p nothing is preloaded\nRun 'mdtrace --help' for usage.\n"},
		{"missing shim", []string{"--shim", dir + "/nope.so", "-o", "guard", "--", "true"}, 1, "mdtrace: the shim (--shim): reading " + dir + "/nope.so: open " + dir + "/nope.so: no such file or directory\n"},
		{"all with a command", []string{"--all", "--", "true"}, 2, "mdtrace: --all audits every process: give neither -p, --program nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"all with options", []string{"--all", "-o", "backtrace"}, 2, "mdtrace: --all takes no malloc debug options: it counts live blocks and bytes per process\nRun 'mdtrace --help' for usage.\n"},
		{"interval without backtrace", []string{"--interval", "1s", "-o", "leak_track", "--", "true"}, 2, "mdtrace: --interval writes heap dumps of the traced processes: it needs the backtrace option\n"},
		{"bad interval", []string{"--interval", "soon", "--", "true"}, 2, "mdtrace: invalid argument \"soon\" for \"--interval\" flag: time: invalid duration \"soon\"\nRun 'mdtrace --help' for usage.\n"},
		{"program with a command", []string{"--program", "x", "--", "true"}, 2, "mdtrace: --program traces the processes that run NAME from now on: give neither -p nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"program with -p", []string{"--program", "x", "-p", "1"}, 2, "mdtrace: --program traces the processes that run NAME from now on: give neither -p nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"empty program", []string{"--program", ""}, 2, "mdtrace: --program needs a program name\nRun 'mdtrace --help' for usage.\n"},
		{"program with a slash", []string{"--program", "bin/ls"}, 2, "mdtrace: --program \"bin/ls\": NAME is matched within file names, so it cannot hold a '/'\nRun 'mdtrace --help' for usage.\n"},
		{"program too long", []string{"--program", strings.Repeat("x", 64)}, 2, "mdtrace: --program NAME is at most 63 bytes long\nRun 'mdtrace --help' for usage.\n"},
		{"program with follow-forks", []string{"--program", "x", "--follow-forks"}, 2, "mdtrace: --follow-forks is for -p: with --program, children are always traced\nRun 'mdtrace --help' for usage.\n"},
		{"program with a shim option", []string{"--program", "x", "-o", "backtrace fill"}, 2, "mdtrace: option fill rewrites memory through the preloaded shim: it needs a command launched by mdtrace, not --program\n"},
		{"all with program", []string{"--all", "--program", "x"}, 2, "mdtrace: --all audits every process: give neither -p, --program nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"negative top", []string{"--top", "-1", "--", "true"}, 2, "mdtrace: invalid --top -1\nRun 'mdtrace --help' for usage.\n"},
		{"top with all", []string{"--all", "--top", "5"}, 2, "mdtrace: --top is for traced processes: --all prints its own summary\nRun 'mdtrace --help' for usage.\n"},
		{"top without backtrace", []string{"--top", "5", "-o", "leak_track", "--", "true"}, 2, "mdtrace: --top lists allocation sites by their backtraces: it needs the backtrace option\n"},
		{"max-allocs too large", []string{"--max-allocs", "134217729", "--", "true"}, 2, "mdtrace: --max-allocs is at most 134217728, a live table of 5.2 GB\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes zero", []string{"--sample-bytes", "0", "--", "true"}, 2, "mdtrace: --sample-bytes must be at least 1\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes not a number", []string{"--sample-bytes", "-5", "--", "true"}, 2, "mdtrace: invalid argument \"-5\" for \"--sample-bytes\" flag: strconv.ParseUint: parsing \"-5\": invalid syntax\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes with -p", []string{"--sample-bytes", "4096", "-p", "1"}, 2, "mdtrace: --sample-bytes samples in the shim preloaded into a launched command: not with -p, --program or --all\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes without the shim", []string{"--sample-bytes", "4096", "--no-preload", "--", "true"}, 2, "mdtrace: --sample-bytes samples in the preloaded shim, which --no-preload turns off\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes with record_allocs", []string{"--sample-bytes", "4096", "-o", "record_allocs", "--", "true"}, 2, "mdtrace: option record_allocs needs every allocator call: it cannot be used with --sample-bytes\n"},
		{"sample-bytes with verify_pointers", []string{"--sample-bytes", "4096", "-o", "backtrace verify_pointers", "--", "true"}, 2, "mdtrace: option verify_pointers needs every allocator call: it cannot be used with --sample-bytes\n"},
		{"no-batch with -p", []string{"--no-batch", "-p", "1"}, 2, "mdtrace: --no-batch is about the shim preloaded into a launched command: not with -p, --program, --all or --no-preload\nRun 'mdtrace --help' for usage.\n"},
		{"no-batch without the shim", []string{"--no-batch", "--no-preload", "--", "true"}, 2, "mdtrace: --no-batch is about the shim preloaded into a launched command: not with -p, --program, --all or --no-preload\nRun 'mdtrace --help' for usage.\n"},
		{"log in a missing directory", []string{"--log", dir + "/no/such/log", "--", "true"}, 1, ""},
	}
	// kthreadd is PID 2 where mdtrace sees the host's PIDs.
	if comm, _ := os.ReadFile("/proc/2/comm"); string(comm) == "kthreadd\n" {
		cases = append(cases, badCase{"kernel thread", []string{"-p", "2"}, 1, "mdtrace: process 2 is a kernel thread: it has no program or allocator to trace\n"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runMdtrace(t, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit status %d, want %d", r.code, tc.code)
			}
			if tc.stderr != "" && r.stderr != tc.stderr {
				t.Errorf("stderr:\n%q\nwant:\n%q", r.stderr, tc.stderr)
			}
			if tc.stderr == "" && !strings.HasPrefix(r.stderr, "mdtrace: opening the log: creating "+dir+"/no/such/log: ") {
				t.Errorf("stderr: %q", r.stderr)
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine") {
				t.Errorf("mdtrace panicked:\n%s", r.stderr)
			}
		})
	}
}

func TestNotRoot(t *testing.T) {
	needRoot(t)
	cmd := exec.Command(mdtraceBin, "--", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.CombinedOutput()
	want := "mdtrace: needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (missing CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE); try sudo\n"
	if string(out) != want || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("as nobody: status %d, output %q, want 1 and %q", cmd.ProcessState.ExitCode(), out, want)
	}
}

func TestVersionAndHelp(t *testing.T) {
	r := runMdtrace(t, "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "mdtrace ") {
		t.Errorf("--version: %d %q", r.code, r.stdout)
	}
	r = runMdtrace(t, "-h")
	if r.code != 0 || !strings.Contains(r.stderr, "Examples:") || !strings.Contains(r.stderr, "--backtrace-dump-prefix") {
		t.Errorf("-h: %d\n%s", r.code, r.stderr)
	}
}

func TestLogFileIsSafe(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep me\n"), 0o644)
	logPath := filepath.Join(dir, "log")
	os.Symlink(victim, logPath)
	cmd := exec.Command(mdtraceBin, "--leak-track", "--log", logPath, "--", prog("leaky"))
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4343")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := readFile(t, victim); got != "keep me\n" {
		t.Errorf("the symlink's target was written: %q", got)
	}
	fi, err := os.Lstat(logPath)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the log is not a regular file: %v %v", fi.Mode(), err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 4242 || st.Gid != 4343 {
		t.Errorf("log owned by %d:%d, want 4242:4343", st.Uid, st.Gid)
	}
}

func TestFullTableIsReported(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "--leak-track", "--max-allocs", "4", "--log", logPath, "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	lineRe := regexp.MustCompile(`(?m)^mdtrace: (\d+) allocations were not tracked: the live table was full \(--max-allocs 4\)$`)
	m := lineRe.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no loss line on stderr:\n%s", r.stderr)
	}
	// The same line is in the log. The smallest table, two buckets of 16
	// slots, overflows with leaky's 10,000 blocks: which of its 13 leaks
	// found a slot depends on their addresses, so on ASLR, but every leak
	// reported is one of leaky's, in a consistent report.
	log := readFile(t, logPath)
	if !strings.Contains(log, "E malloc_debug: "+m[0]+"\n") {
		t.Errorf("the log lacks %q:\n%s", m[0], log)
	}
	n := strings.Count(log, "leaked block")
	if n == 0 || n > 13 {
		t.Errorf("%d leaks reported from a table of 32 slots; want 1 to 13 of leaky's 13", n)
	}
	if want := fmt.Sprintf("(leak %d of %d)\n", n, n); !strings.Contains(log, want) {
		t.Errorf("the report does not end with %q:\n%s", want, log)
	}
}

func sleepBriefly() { time.Sleep(50 * time.Millisecond) }

func TestCPlusPlusNames(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "-o", "backtrace leak_track", "--log", logPath, "--", prog("cppleak"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	// The shim's operator new[] calls its malloc: the block's first frame
	// is new[], and the next the function that called it.
	want := []string{
		"cppleak geo::Arena<char>::raw(unsigned long)", "cppleak main",
		"libmdshim.so operator new[](unsigned long)", "cppleak geo::Arena<char>::fresh(unsigned long)",
		"libmdshim.so operator new[](unsigned long, std::nothrow_t const&)", "cppleak geo::Arena<char>::spare(unsigned long)",
	}
	if got := leakFrames(t, readFile(t, logPath), ""); !slices.Equal(got, want) {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCPlusPlusNamesProbed: without the shim, libstdc++'s operator new is
// probed too, when the program starts (--no-preload) or already runs (-p):
// the backtrace of a block from new is taken where new returns, and starts
// with the function that called it.
func TestCPlusPlusNamesProbed(t *testing.T) {
	needRoot(t)
	want := []string{
		"cppleak geo::Arena<char>::raw(unsigned long)", "cppleak main",
		"cppleak geo::Arena<char>::fresh(unsigned long)", "cppleak main",
		"cppleak geo::Arena<char>::spare(unsigned long)", "cppleak main",
	}
	t.Run("launched", func(t *testing.T) {
		logPath := filepath.Join(t.TempDir(), "log")
		r := runMdtrace(t, "--no-preload", "-o", "backtrace leak_track", "--log", logPath, "--", prog("cppleak"))
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		if got := leakFrames(t, readFile(t, logPath), ""); !slices.Equal(got, want) {
			t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	// jemalloc's own operator new is probed as an allocation function:
	// the backtrace is taken where it returns.
	t.Run("jemalloc", func(t *testing.T) {
		if _, err := os.Stat(jemalloc); err != nil {
			t.Skipf("libjemalloc2 is not installed (make deps installs it): %v", err)
		}
		logPath := filepath.Join(t.TempDir(), "log")
		r := runMdtraceEnv(t, []string{"LD_PRELOAD=" + jemalloc}, "-o", "backtrace leak_track", "--log", logPath, "--", prog("cppleak"))
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		if got := leakFrames(t, readFile(t, logPath), ""); !slices.Equal(got, want) {
			t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("attached", func(t *testing.T) {
		pid, _, log := attachAndRun(t, nil, "cppleak: done", prog("cppleak"), "hold")
		if got := leakFrames(t, log, pid); !slices.Equal(got, want) {
			t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestVerboseProbePoints: --verbose says where each allocator function's
// probe went and which ones the kernel single-steps.
func TestVerboseProbePoints(t *testing.T) {
	needRoot(t)
	r := runMdtrace(t, "--no-preload", "--verbose", "-o", "backtrace", "--log", filepath.Join(t.TempDir(), "log"), "--", prog("pairs"), "10")
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	lib, err := tracer.AllocatorOfFile(prog("pairs"), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := tracer.FuncOffset(lib, "free")
	if err != nil {
		t.Fatal(err)
	}
	point, err := tracer.ProbeOffset(lib, "free")
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "mdtrace: probe points: ") {
			line = l
		}
	}
	// glibc's free: past its null test, on a push.
	if want := fmt.Sprintf(" free+%d (push),", point-entry); !strings.Contains(line, want) || !strings.HasPrefix(line, "mdtrace: probe points: malloc+") {
		t.Errorf("stderr:\n%s\nwant a line of probe points with %q", r.stderr, want)
	}
	// Without --verbose, no such line.
	r = runMdtrace(t, "--no-preload", "-o", "backtrace", "--log", filepath.Join(t.TempDir(), "log"), "--", prog("pairs"), "10")
	if strings.Contains(r.stderr, "probe points") {
		t.Errorf("without --verbose:\n%s", r.stderr)
	}
	// jemalloc's free with verify_pointers: on its first instruction.
	if _, err := os.Stat(jemalloc); err != nil {
		t.Skipf("libjemalloc2 is not installed (make deps installs it): %v", err)
	}
	r = runMdtraceEnv(t, []string{"LD_PRELOAD=" + jemalloc}, "--no-preload", "--verbose", "-o", "verify_pointers", "--log", filepath.Join(t.TempDir(), "log"), "--", prog("pairs"), "10")
	if want := " free+0 (mov) single-stepped,"; !strings.Contains(r.stderr, want) {
		t.Errorf("jemalloc, verify_pointers: stderr:\n%s\nwant %q", r.stderr, want)
	}
}

// leakFrames returns the first two frames of cppleak's leaks of 777, 555
// and 333 bytes in a log, each as "FILE FUNCTION".
func leakFrames(t *testing.T, log, pid string) []string {
	t.Helper()
	msgs := logMessages(t, log, pid)
	var got []string
	for i, m := range msgs {
		if strings.Contains(m, "leaked block of size 777 ") || strings.Contains(m, "leaked block of size 555 ") ||
			strings.Contains(m, "leaked block of size 333 ") {
			for _, f := range msgs[i+2 : i+4] {
				fm := frameRe.FindStringSubmatch(f)
				if fm == nil {
					t.Fatalf("frame line %q", f)
				}
				got = append(got, fmt.Sprintf("%s %s", filepath.Base(fm[3]), fm[4]))
			}
		}
	}
	return got
}

func TestStrippedWithDebugDir(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "leaky")
	debug := filepath.Join(dir, "leaky.debug")
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("cp", prog("leaky"), bin)
	run("objcopy", "--only-keep-debug", bin, debug)
	run("strip", "--strip-all", bin)
	f, err := elf.Open(debug)
	if err != nil {
		t.Fatal(err)
	}
	var id []byte
	for _, s := range f.Sections {
		if s.Name == ".note.gnu.build-id" {
			b, _ := s.Data()
			id = b[16:]
		}
	}
	f.Close()
	if len(id) < 2 {
		t.Fatal("no build-id in leaky")
	}
	hexID := fmt.Sprintf("%x", id)
	ddir := filepath.Join(dir, "debug", ".build-id", hexID[:2])
	os.MkdirAll(ddir, 0o755)
	run("cp", debug, filepath.Join(ddir, hexID[2:]+".debug"))

	report := func(args ...string) string {
		logPath := filepath.Join(dir, "log")
		r := runMdtrace(t, append(append([]string{"-o", "backtrace leak_track", "--log", logPath}, args...), "--", bin)...)
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		return readFile(t, logPath)
	}
	if log := report(); strings.Contains(log, "(leak_malloc+") {
		t.Errorf("a stripped binary resolved local names without its debug file")
	}
	if log := report("--debug-dir", filepath.Join(dir, "debug")); !strings.Contains(log, bin+" (leak_malloc+") || !strings.Contains(log, bin+" (main+") {
		t.Errorf("names not resolved through --debug-dir:\n%s", log)
	}
}

func TestBacktraceFull(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	pid, _ := launchOK(t, dir, "-o", "bt bt_full leak_track bt_dmp_on_ex bt_dmp_pre="+dir+"/h", "--log", logPath, "--", prog("leaky"))
	// The leak report's frames in the backtrace_full form: "#0", not "#00".
	fullRe := regexp.MustCompile(`^          #(\d+)  pc ([0-9a-f]{16})  (\S+)(?: \((.+)\+(\d+)\))?$`)
	msgs := logMessages(t, readFile(t, logPath), "")
	var first []string
	for i, m := range msgs {
		if m == "Backtrace at time of allocation:" {
			fm := fullRe.FindStringSubmatch(msgs[i+1])
			if fm == nil || fm[1] != "0" {
				t.Fatalf("frame line %q", msgs[i+1])
			}
			first = append(first, fm[4])
		}
	}
	if got := strings.Join(first, " "); !strings.HasPrefix(got, "leak_pvalloc leak_aligned_alloc leak_in_constructor") {
		t.Errorf("first frames: %s", got)
	}
	// Every record of the heap dump is followed by its bt_info line.
	dump := strings.Split(readFile(t, fmt.Sprintf("%s/h.%d.exit.txt", dir, pid)), "\n")
	infoRe := regexp.MustCompile(`^  bt_info( \{"[^"]*" [0-9a-f]+ "[^"]*" [0-9a-f]+\})+$`)
	records := 0
	for i, l := range dump {
		if strings.HasPrefix(l, "z 0  sz ") {
			records++
			if !infoRe.MatchString(dump[i+1]) {
				t.Errorf("record %q followed by %q", l, dump[i+1])
			}
		}
	}
	if records != 13 {
		t.Errorf("%d records", records)
	}
	want := fmt.Sprintf(`  bt_info {"%s" `, prog("leaky"))
	if !strings.HasPrefix(dump[9], want) || !strings.Contains(dump[9], `"leak_pvalloc" `) {
		t.Errorf("first bt_info line %q", dump[9])
	}
}

func TestUnloadedLibraryNames(t *testing.T) {
	needRoot(t)
	// dlhost loads libplugin.so, which leaks, then unloads it before exit,
	// and other files are mapped over its old addresses.
	logPath := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command(mdtraceBin, "-o", "backtrace leak_track", "--log", logPath, "--", "./dlhost")
	cmd.Dir = testdataDir // a relative dlopen path, resolved in the process's directory
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	msgs := logMessages(t, readFile(t, logPath), "")
	for i, m := range msgs {
		if strings.Contains(m, "leaked block of size 4321 ") {
			fm := frameRe.FindStringSubmatch(msgs[i+2])
			if fm == nil || fm[3] != prog("libplugin.so") || fm[4] != "plugin_leak" {
				t.Errorf("the unloaded plugin's frame: %q", msgs[i+2])
			}
			return
		}
	}
	t.Errorf("no leak of 4321 bytes:\n%s", strings.Join(msgs, "\n"))
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

// TestVerifyPointers checks verify_pointers in both launch modes. With
// probes on glibc, eBPF reports the bad pointer and glibc then aborts on
// the double and the interior free. With the shim, the shim reports it
// with Android's messages and skips the operation: the program lives on.
func TestVerifyPointers(t *testing.T) {
	needRoot(t)
	abort := 128 + int(syscall.SIGABRT)
	for _, mode := range []struct {
		name, flag, golden string
		codes              []int
	}{
		{"sites", "--shim=", "verify_pointers_shim.txt", []int{0, 0, 0}},
		{"no-preload", "--no-preload", "verify_pointers.txt", []int{abort, abort, 0}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			var all strings.Builder
			for i, m := range []string{"double", "interior", "usable"} {
				logPath := filepath.Join(t.TempDir(), "log")
				r := runMdtrace(t, modeFlag(mode.flag), "-o", "verify_pointers", "--log", logPath, "--", prog("verify"), m)
				if r.code != mode.codes[i] {
					t.Errorf("%s: exit status %d, want %d; stderr:\n%s", m, r.code, mode.codes[i], r.stderr)
				}
				// malloc_usable_size is probed for verify_pointers only.
				if probe := " pvalloc malloc_usable_size in /"; mode.name == "no-preload" && !strings.Contains(r.stderr, probe) {
					t.Errorf("%s: stderr lacks %q:\n%s", m, probe, r.stderr)
				}
				fmt.Fprintf(&all, "== %s\n%s", m, normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("verify")))
			}
			golden(t, mode.golden, regexp.MustCompile(`ALLOCATION 0x[0-9a-f]+`).ReplaceAllString(all.String(), "ALLOCATION 0xPTR"))

			// A correct program, realloc(p, 0) and frees inside the
			// allocator included, gives no error.
			logPath := filepath.Join(t.TempDir(), "log")
			if r := runMdtrace(t, modeFlag(mode.flag), "-o", "verify_pointers", "--log", logPath, "--", prog("leaky")); r.code != 0 {
				t.Fatalf("leaky: exit status %d", r.code)
			}
			if log := readFile(t, logPath); log != "" {
				t.Errorf("errors for a correct program:\n%s", log)
			}
		})
	}
}

// TestVerifyPointersThreads: as a thread ends, glibc frees through free the
// blocks its thread cache holds, which the program freed before, and the
// cache itself, which no malloc call made. With probes on glibc those are
// neither double frees nor unknown pointers: a correct program with
// threads runs to its end under abort_on_error. A double free made by the
// program as a thread ends, in a destructor of thread-specific data, is
// still reported, from the destructor.
func TestVerifyPointersThreads(t *testing.T) {
	needRoot(t)
	for _, flag := range []string{"--no-preload", "--shim="} {
		logPath := filepath.Join(t.TempDir(), "log")
		r := runMdtrace(t, modeFlag(flag), "-o", "verify_pointers abort_on_error", "--log", logPath, "--", prog("verify"), "threads")
		if r.code != 0 {
			t.Errorf("%s: exit status %d, want 0; stderr:\n%s", flag, r.code, r.stderr)
		}
		if log := readFile(t, logPath); log != "" {
			t.Errorf("%s: errors for a correct program:\n%s", flag, log)
		}
	}
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "--no-preload", "-o", "verify_pointers", "--log", logPath, "--", prog("verify"), "thread-double")
	if r.code != 128+int(syscall.SIGABRT) {
		t.Errorf("thread-double: exit status %d, want glibc's abort", r.code)
	}
	got := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("verify"))
	got = regexp.MustCompile(`ALLOCATION 0x[0-9a-f]+`).ReplaceAllString(got, "ALLOCATION 0xPTR")
	stars := strings.Repeat("*** ", 15) + "***\n"
	want := stars +
		"+++ ALLOCATION 0xPTR USED AFTER FREE (free)\n" +
		"Backtrace of original free:\n" +
		"          #00  pc PC  verify (thread_first_free+OFF)\n" +
		"          #01  pc PC  verify (free_then_end+OFF)\n" +
		"Backtrace at time of failure:\n" +
		"          #00  pc PC  verify (destructor_free+OFF)\n" +
		stars
	if got != want {
		t.Errorf("thread-double: log\n%s\nwant\n%s", got, want)
	}
}

// TestVforkChildBlocks: a child of vfork allocates in its parent's memory
// until it executes, and the probes, which the kernel filters by address
// space, see it: its blocks are the parent's. The parent frees one after
// the child has executed (no error, even with abort_on_error) and leaks the
// other, reported as its own with the backtrace the child allocated it at.
func TestVforkChildBlocks(t *testing.T) {
	needRoot(t)
	want := "+++ testdata/vforker leaked block of size 3333 at 0xPTR (leak 1 of 1)\n" +
		"Backtrace at time of allocation:\n" +
		"          #00  pc PC  vforker (in_vfork_child+OFF)\n" +
		"          #01  pc PC  vforker (main+OFF)\n"
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track verify_pointers abort_on_error", "--log", logPath, "--", prog("vforker"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			if got := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("vforker")); got != want {
				t.Errorf("log:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestVerifyPointersAttached(t *testing.T) {
	needRoot(t)
	// attachee frees five blocks from before the attach: unknown to the
	// table, never errors.
	dir := t.TempDir()
	target := start(t, prog("attachee"))
	target.expectLine(t, "ready")
	m := start(t, mdtraceBin, "-p", fmt.Sprint(target.cmd.Process.Pid), "-o", "verify_pointers leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	target.wait(t)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := readFile(t, dir+"/log")
	if strings.Contains(log, "ALLOCATION") || strings.Count(log, "leaked block") != 3 {
		t.Errorf("log:\n%s", log)
	}
}

// sourceLine returns the number of the line of a testdata source file
// that holds text.
func sourceLine(t *testing.T, file, text string) int {
	t.Helper()
	for i, l := range strings.Split(readFile(t, filepath.Join(testdataDir, file)), "\n") {
		if strings.Contains(l, text) {
			return i + 1
		}
	}
	t.Fatalf("%s has no %q", file, text)
	return 0
}

func TestFoldedStacksWithLines(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	r := runMdtrace(t, "--backtrace", "--folded", dir+"/folded", "--log", "/dev/null", "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	folded := readFile(t, dir+"/folded")
	want := fmt.Sprintf(";main (leaky.c:%d);leak_malloc (leaky.c:%d) 1001\n",
		sourceLine(t, "leaky.c", "\tleak_malloc();"), sourceLine(t, "leaky.c", "malloc(1001)"))
	if !strings.Contains(folded, want) {
		t.Errorf("no line ending in %q:\n%s", want, folded)
	}
	if n := strings.Count(folded, "\n"); n != 13 {
		t.Errorf("%d folded stacks, want 13:\n%s", n, folded)
	}
}

func TestShimGuardUnderMdtrace(t *testing.T) {
	needRoot(t)
	shim := filepath.Join(t.TempDir(), "libmdshim.so")
	if err := copyFile(shimBin(), shim); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "-o", "guard backtrace leak_track", "--shim", shim, "--log", logPath, "--", prog("guardy"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	// The shim's error block reaches mdtrace's log, ahead of the leak report...
	log := readFile(t, logPath)
	var block []string
	for _, m := range logMessages(t, log, "") {
		if strings.Contains(m, "guardy leaked block") {
			break
		}
		if !strings.HasPrefix(m, "          #") {
			block = append(block, regexp.MustCompile(`0x[0-9a-f]{6,}`).ReplaceAllString(m, "0xPTR"))
		}
	}
	want := []string{
		logDivider,
		"+++ ALLOCATION 0xPTR SIZE 100 HAS A CORRUPTED REAR GUARD",
		"  allocation[130] = 0xbf (expected 0xbb)",
		"  allocation[131] = 0x00 (expected 0xbb)",
		"Backtrace at time of failure:",
		logDivider,
	}
	if strings.Join(block, "\n") != strings.Join(want, "\n") {
		t.Errorf("the shim's report:\n%s\nwant:\n%s\nlog:\n%s", strings.Join(block, "\n"), strings.Join(want, "\n"), log)
	}
	if strings.Contains(r.stderr, "malloc_debug") {
		t.Errorf("malloc_debug lines on stderr with --log:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "in "+shim+"\n") {
		t.Errorf("the probes are not on the shim:\n%s", r.stderr)
	}
	// ...and mdtrace sees the size the program asked for, not the guarded one.
	want2 := "+++ testdata/guardy leaked block of size 1234 at 0xPTR (leak 1 of 1)\nBacktrace at time of allocation:\n          #00  pc PC  guardy (leak_with_guard+OFF)\n          #01  pc PC  guardy (main+OFF)\n"
	var report []string
	for i, m := range logMessages(t, log, "") {
		if strings.Contains(m, "guardy leaked block") {
			report = logMessages(t, log, "")[i:]
			break
		}
	}
	if got := normalizeLeakReport(t, report, prog("guardy")); got != want2 {
		t.Errorf("leak report:\n%s\nwant:\n%s", got, want2)
	}
}
