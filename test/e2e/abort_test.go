//go:build linux

package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// goldenSections splits a golden file of TestVerifyPointers ("== name"
// lines, each followed by its normalized log) into its sections.
func goldenSections(t *testing.T, name string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var cur string
	for _, line := range strings.SplitAfter(readFile(t, filepath.Join(testdataDir, "golden", name)), "\n") {
		if n, ok := strings.CutPrefix(line, "== "); ok {
			cur = strings.TrimSuffix(n, "\n")
			continue
		}
		out[cur] += line
	}
	return out
}

var allocationRe = regexp.MustCompile(`ALLOCATION 0x[0-9a-f]+`)

// checkAbortLog checks that a log holds one error block, the one
// TestVerifyPointers expects for the same case, and nothing after it.
func checkAbortLog(t *testing.T, log, pid, progPath, want string) {
	t.Helper()
	msgs := logMessages(t, log, pid)
	got := allocationRe.ReplaceAllString(normalizeLeakReport(t, msgs, progPath), "ALLOCATION 0xPTR")
	if got != want {
		t.Errorf("log:\n%s\nwant:\n%s\nraw log:\n%s", got, want, log)
	}
	if len(msgs) == 0 || msgs[0] != logDivider || msgs[len(msgs)-1] != logDivider || strings.Count(log, logDivider) != 2 {
		t.Errorf("the log is not exactly one error block:\n%s", log)
	}
}

// jemalloc is Debian's libjemalloc2.
const jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

// glibcError is how glibc's free reports the pointers it catches itself
// before it aborts; with abort_on_error the program dies before glibc
// sees the pointer.
var glibcError = regexp.MustCompile(`free\(\): [a-z ]+`)

// TestAbortOnError checks abort_on_error after a verify_pointers error in
// both launch modes: the process dies of SIGABRT, which mdtrace passes on
// as 134, after the whole error block is in the log. With probes on glibc
// the signal comes from the entry probe, so glibc never gets the pointer;
// with the shim, the shim aborts after its own block.
func TestAbortOnError(t *testing.T) {
	needRoot(t)
	abort := 128 + int(syscall.SIGABRT)
	for _, mode := range []struct {
		name, flag, golden string
		env                []string
	}{
		{"sites", "--shim=", "verify_pointers_shim.txt", nil},
		{"no-preload", "--no-preload", "verify_pointers.txt", nil},
		// jemalloc's free reads through the pointer before its first
		// branch: with verify_pointers its probe stays on the entry.
		{"jemalloc", "--no-preload", "verify_pointers.txt", []string{"LD_PRELOAD=" + jemalloc}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.env != nil {
				if _, err := os.Stat(jemalloc); err != nil {
					t.Skipf("libjemalloc2 is not installed (make deps installs it): %v", err)
				}
			}
			want := goldenSections(t, mode.golden)
			for _, m := range []string{"usable", "double", "interior"} {
				t.Run(m, func(t *testing.T) {
					logPath := filepath.Join(t.TempDir(), "log")
					r := runMdtraceEnv(t, mode.env, modeFlag(mode.flag), "-o", "verify_pointers abort_on_error", "--log", logPath, "--", prog("verify"), m)
					if r.code != abort {
						t.Errorf("exit status %d, want %d; stderr:\n%s", r.code, abort, r.stderr)
					}
					if e := glibcError.FindString(r.stderr); e != "" {
						t.Errorf("glibc saw the bad pointer (%q): the call went on after the error", e)
					}
					checkAbortLog(t, readFile(t, logPath), "", prog("verify"), want[m])
				})
			}
		})
	}
}

// TestAbortOnErrorWithoutVerify checks that abort_on_error alone aborts
// nothing: in eBPF only verify_pointers finds errors, and leaks never
// abort.
func TestAbortOnErrorWithoutVerify(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "--no-preload", "-o", "backtrace leak_track abort_on_error", "--log", logPath, "--", prog("verify"), "usable")
	if r.code != 0 {
		t.Errorf("exit status %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	if log := readFile(t, logPath); strings.Contains(log, "+++ ALLOCATION") {
		t.Errorf("an error without verify_pointers:\n%s", log)
	}
	// verify write leaks a block: reported, no abort.
	r = runMdtrace(t, "--no-preload", "-o", "backtrace leak_track verify_pointers abort_on_error", "--log", logPath, "--", prog("verify"), "write")
	if r.code != 0 {
		t.Errorf("leak: exit status %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	if log := readFile(t, logPath); !strings.Contains(log, "leaked block of size 1234") || strings.Contains(log, "+++ ALLOCATION") {
		t.Errorf("log:\n%s", log)
	}
}

// abortee is a test program for abort_on_error: it says "ready", waits
// for a line on standard input, then frees a block twice, the second time
// on the main thread or, with "thread", on another one. It says
// "survived" if it lives on.
const abortee = `#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static char *volatile p;

NOINLINE void make_block(void) { p = malloc(100); }
NOINLINE void first_free(void) { free(p); }
NOINLINE void second_free(void) { free(p); }
NOINLINE void *worker(void *arg) { second_free(); return arg; }

int main(int argc, char **argv)
{
	pthread_t t;
	char c;

	write(1, "ready\n", 6);
	while (read(0, &c, 1) == 1 && c != '\n')
		;
	make_block();
	first_free();
	if (argc > 1 && strcmp(argv[1], "thread") == 0) {
		pthread_create(&t, NULL, worker, NULL);
		pthread_join(t, NULL);
	} else {
		second_free();
	}
	write(1, "survived\n", 9);
	return 0;
}
`

// buildAbortee compiles abortee as the test programs are built.
func buildAbortee(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "abortee.c"), filepath.Join(dir, "abortee")
	if err := os.WriteFile(src, []byte(abortee), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := exec.Command("cc", "-O0", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-fno-optimize-sibling-calls", "-pthread", "-o", bin, src)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("building abortee: %v\n%s", err, out)
	}
	return bin
}

// aborteeBlock is abortee's error block, normalized, for the thread that
// frees the block the second time.
func aborteeBlock(thread bool) string {
	caller := "main"
	if thread {
		caller = "worker"
	}
	return logDivider + "\n" +
		"+++ ALLOCATION 0xPTR UNKNOWN POINTER (free)\n" +
		"Backtrace of original free:\n" +
		"          #00  pc PC  abortee (first_free+OFF)\n" +
		"          #01  pc PC  abortee (main+OFF)\n" +
		"Backtrace at time of failure:\n" +
		"          #00  pc PC  abortee (second_free+OFF)\n" +
		"          #01  pc PC  abortee (" + caller + "+OFF)\n" +
		logDivider + "\n"
}

// TestAbortOnErrorAttached checks abort_on_error in a process mdtrace
// attaches to, with the bad free on its main thread and on another
// thread: either way the block is written while the process is held at
// its exit, then it dies of SIGABRT before glibc sees the pointer.
// mdtrace says so, and ends with 134 (128+SIGABRT), as in launch mode.
func TestAbortOnErrorAttached(t *testing.T) {
	needRoot(t)
	bin := buildAbortee(t)
	for _, m := range []string{"main", "thread"} {
		t.Run(m, func(t *testing.T) {
			dir := t.TempDir()
			target := start(t, bin, m)
			target.expectLine(t, "ready")
			pid := fmt.Sprint(target.cmd.Process.Pid)
			md := start(t, mdtraceBin, "-p", pid, "-o", "verify_pointers abort_on_error", "--log", dir+"/log", "--ready-file", dir+"/ready")
			waitFile(t, dir+"/ready")
			io.WriteString(target.stdin, "go\n")
			target.wait(t)
			ws := target.cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGABRT {
				t.Errorf("the process ended with %v, want SIGABRT; stderr:\n%s", target.cmd.ProcessState, target.stderr.String())
			}
			if e := glibcError.FindString(target.stderr.String()); e != "" {
				t.Errorf("glibc saw the bad pointer (%q): the call went on after the error", e)
			}
			want := fmt.Sprintf("mdtrace: process %s (%s) was killed by signal 6 (SIGABRT)\n", pid, bin)
			if code := md.wait(t); code != 128+int(syscall.SIGABRT) || !strings.HasSuffix(md.stderr.String(), want) {
				t.Errorf("mdtrace exit status %d; stderr:\n%s\nwant 134, ending with:\n%s", code, md.stderr.String(), want)
			}
			logPID := pid
			if m == "thread" {
				logPID = "" // the thread's id is not the process's
			}
			checkAbortLog(t, readFile(t, dir+"/log"), logPID, bin, aborteeBlock(m == "thread"))
		})
	}
}

// TestAbortOnErrorThread checks abort_on_error for a bad pointer given on
// a thread other than the main one of a launched command.
func TestAbortOnErrorThread(t *testing.T) {
	needRoot(t)
	bin := buildAbortee(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "--no-preload", "-o", "verify_pointers abort_on_error", "--log", logPath, "--", bin, "thread")
	if r.code != 128+int(syscall.SIGABRT) {
		t.Errorf("exit status %d, want 134; stderr:\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "survived") {
		t.Errorf("the program lived on after the error")
	}
	if e := glibcError.FindString(r.stderr); e != "" {
		t.Errorf("glibc saw the bad pointer (%q): the call went on after the error", e)
	}
	checkAbortLog(t, readFile(t, logPath), "", bin, aborteeBlock(true))
}
