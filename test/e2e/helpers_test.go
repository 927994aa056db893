//go:build linux

// Package e2e runs the built mdtrace on the C programs of testdata/, as a
// user would, and checks its reports, files and exit statuses line by line.
// Tests are by feature: leaks, heap dumps, attach, the command line,
// symbols, verify_pointers, the shim, processes, records, signals, stacks.
package e2e

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/internal/fixture"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// logDivider frames each error report in Android's malloc_debug log.
const logDivider = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***"

// mdtraceBin is the mdtrace binary under test, built once by TestMain,
// with the shim next to it.
var mdtraceBin string

// testdataDir holds the C test programs (built as tests ask for them,
// with prog) and the golden files.
var testdataDir string

func TestMain(m *testing.M) {
	flag.Parse()
	testdataDir = fixture.Testdata()
	bin, err := fixture.MdtracePath()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mdtraceBin = bin
	code := m.Run()
	fixture.Cleanup()
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

// prog is testdata's program name, built the first time a test asks for
// it; a build that fails is said, and the test fails running the program.
func prog(name string) string {
	path, err := fixture.ProgramPath(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return path
}

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
// whose names depend on the distribution) are dropped, and so are those
// after main and _start (the C runtime's start, which a walk by frame
// pointers does not reach through libc and a walk by unwind tables does:
// the chains to _start are the unwinder's tests').
func normalizeLeakReport(t *testing.T, msgs []string, progPath string) string {
	t.Helper()
	var b strings.Builder
	pastMain := false
	for _, m := range msgs {
		if fm := frameRe.FindStringSubmatch(m); fm != nil {
			if fm[3] != progPath || pastMain || fm[4] == "_start" {
				continue
			}
			pastMain = fm[4] == "main"
			fmt.Fprintf(&b, "          #%s  pc PC  %s (%s+OFF)\n", fm[1], filepath.Base(fm[3]), fm[4])
			continue
		}
		pastMain = false
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

// interrupt ends mdtrace b with SIGINT, and returns what it wrote on its
// standard output; an exit status other than 0 is an error of the test.
func (b *background) interrupt(t *testing.T) []byte {
	t.Helper()
	b.cmd.Process.Signal(syscall.SIGINT)
	out, _ := io.ReadAll(b.stdout)
	if code := b.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, b.stderr.String())
	}
	return out
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

// attachGo attaches mdtrace with args to target, a program that waits for
// "go" on its standard input; lets it go once mdtrace is ready (its
// --ready-file in dir); and waits for both to end with status 0. It
// returns mdtrace, ended.
func attachGo(t *testing.T, target *background, dir string, args ...string) *background {
	t.Helper()
	m := start(t, mdtraceBin, append([]string{"-p", fmt.Sprint(target.cmd.Process.Pid), "--ready-file", dir + "/ready"}, args...)...)
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("%s exit status %d", filepath.Base(target.cmd.Path), code)
	}
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	return m
}
