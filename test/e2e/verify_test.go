//go:build linux

package e2e

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

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
		"+++ ALLOCATION 0xPTR UNKNOWN POINTER (free)\n" +
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
	// The vfork child's report, empty, then the parent's, then the run's
	// bottom line.
	want := "mdtrace: 0 bytes in 0 leaked allocations\n" +
		"+++ testdata/vforker leaked block of size 3333 at 0xPTR (leak 1 of 1)\n" +
		"Backtrace at time of allocation:\n" +
		"          #00  pc PC  vforker (in_vfork_child+OFF)\n" +
		"          #01  pc PC  vforker (main+OFF)\n" +
		"mdtrace: 3333 bytes in 1 leaked allocations\n" +
		"mdtrace: 3333 bytes in 1 leaked allocations in 2 processes\n"
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
