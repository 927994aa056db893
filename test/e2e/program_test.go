//go:build linux

package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitLogLine waits until the log at path has a line that ends with suffix.
func waitLogLine(t *testing.T, path, suffix string) {
	t.Helper()
	for range 600 {
		b, _ := os.ReadFile(path)
		for line := range strings.SplitSeq(string(b), "\n") {
			if strings.HasSuffix(line, suffix) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no line ending with %q in %s:\n%s", suffix, path, readFile(t, path))
}

// processLog keeps the lines of a malloc_debug log that process pid wrote.
func processLog(log string, pid int) string {
	var b strings.Builder
	for line := range strings.SplitSeq(log, "\n") {
		if m := logRe.FindStringSubmatch(line); m != nil && m[1] == fmt.Sprint(pid) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestProgramMode: with --program, a process started after mdtrace that
// runs a matching program is traced from its first instruction, so its
// report is launch mode's, byte for byte (a constructor's leak included);
// one that exits at once gets its report too; a program whose name does not
// match is not traced.
func TestProgramMode(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	const name = "mdtrace-program-leaky"
	leaky := filepath.Join(dir, name)
	if err := copyFile(prog("leaky"), leaky); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(leaky, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "log")
	m := start(t, mdtraceBin, "--program", "program-leak", "-o", "backtrace leak_track verbose", "--log", logPath, "--ready-file", dir+"/ready",
		"--folded", dir+"/folded")
	waitFile(t, dir+"/ready")

	held := start(t, leaky, "hold")
	held.expectLine(t, "leaky: done")
	waitLogLine(t, logPath, fmt.Sprintf(" %d I malloc_debug: %s: malloc debug enabled", held.cmd.Process.Pid, leaky))
	io.WriteString(held.stdin, "\n")
	if code := held.wait(t); code != 0 {
		t.Fatalf("%s exit status %d", name, code)
	}
	quick := start(t, leaky, "0")
	quick.wait(t)
	other := start(t, prog("leaky"), "0")
	other.wait(t)

	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := readFile(t, logPath)
	heldLog := processLog(log, held.cmd.Process.Pid)
	report := normalizeLeakReport(t, logMessages(t, heldLog, ""), leaky)
	report = strings.ReplaceAll(report, leaky, "testdata/leaky")
	report = strings.ReplaceAll(report, name+" (", "leaky (")
	var kept []string
	for _, l := range strings.SplitAfter(report, "\n") {
		if !strings.HasSuffix(l, ": malloc debug enabled\n") && !strings.Contains(l, ": Run: 'kill -") {
			kept = append(kept, l)
		}
	}
	golden(t, "leaky_leak_report.txt", strings.Join(kept, ""))

	counts := leakCounts(t, log)
	if n := len(counts[quick.cmd.Process.Pid]); n != 13 {
		t.Errorf("the process that exited at once: %d leaks, want 13; log:\n%s", n, processLog(log, quick.cmd.Process.Pid))
	}
	if got := processLog(log, other.cmd.Process.Pid); got != "" {
		t.Errorf("a program that does not match was traced:\n%s", got)
	}
	// Each process's folded stacks, to FILE.PID: there is no first process.
	folded := readFile(t, fmt.Sprintf("%s/folded.%d", dir, held.cmd.Process.Pid))
	if want := regexp.MustCompile(`;main \(leaky\.c:\d+\);leak_pvalloc \(leaky\.c:\d+\) 4096\n`); !want.MatchString(folded) {
		t.Errorf("folded stacks lack leak_pvalloc's 4096 bytes:\n%s", folded)
	}
	if want := fmt.Sprintf("mdtrace: tracing process %d (%s)\n", held.cmd.Process.Pid, leaky); !strings.Contains(m.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, m.stderr.String())
	}
}

// TestProgramModeZygote: a child that a matched process forks is traced as
// a zygote child: it starts with its parent's blocks, and what it
// allocates is marked z 1.
func TestProgramModeZygote(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	forker := filepath.Join(dir, "mdtrace-program-forker")
	if err := copyFile(prog("forker"), forker); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(forker, 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "log")
	m := start(t, mdtraceBin, "--program", "program-fork", "-o", "backtrace verbose backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h", "--log", logPath, "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	target := start(t, forker, "wait")
	target.expectLine(t, "ready")
	parent := target.cmd.Process.Pid
	waitLogLine(t, logPath, fmt.Sprintf(" %d I malloc_debug: %s: malloc debug enabled", parent, forker))
	io.WriteString(target.stdin, "go\n")
	var child int
	line, _ := target.stdout.ReadString('\n')
	if _, err := fmt.Sscanf(line, "child %d\n", &child); err != nil {
		t.Fatalf("read %q: %v", line, err)
	}
	target.expectLine(t, fmt.Sprintf("parent %d", parent))
	if code := target.wait(t); code != 0 {
		t.Fatalf("forker exit status %d", code)
	}
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	if want := fmt.Sprintf("mdtrace: tracing process %d, forked from %d\n", child, parent); !strings.Contains(m.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, m.stderr.String())
	}
	for pid, want := range map[int][]string{
		parent: {"z 0 sz 4096 num 2", "z 0 sz 1111 num 1"},
		child:  {"z 0 sz 4096 num 2", "z 0 sz 1111 num 1", "z 1 sz 2222 num 1"},
	} {
		got := dumpRecords(t, fmt.Sprintf("%s/h.%d.exit.txt", dir, pid))
		if !slices.Equal(got, want) {
			t.Errorf("process %d's dump: %q, want %q", pid, got, want)
		}
	}
}
