//go:build linux

package e2e

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLeaderExitsFirst: a launched command (and a child it forks) whose
// main thread ends alone (pthread_exit) runs on in its other thread, which
// leaks three blocks and ends the process with status 3. Its reports wait
// for the whole process: every leak is in them, the thread's with their
// stacks, and mdtrace says why they came late. Before, the report was
// written at the main thread's exit, without the thread's leaks.
func TestLeaderExitsFirst(t *testing.T) {
	needRoot(t)
	for _, mode := range []string{"launched", "forked"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"-o", "backtrace leak_track", "--", prog("leaderexit")}
			if mode == "forked" {
				args = append(args, "forked")
			}
			r := runMdtrace(t, args...)
			if r.code != 3 {
				t.Fatalf("exit code %d, want 3 (the process's); stderr:\n%s", r.code, r.stderr)
			}
			if r.stdout != "outlived\n" {
				t.Errorf("stdout %q, want the thread's line", r.stdout)
			}
			// The process whose main thread ended: the command, or its child.
			m := regexp.MustCompile(`mdtrace: tracing process (\d+) \(`).FindAllStringSubmatch(r.stderr, -1)
			fm := regexp.MustCompile(`mdtrace: tracing process (\d+), forked from \d+\n`).FindStringSubmatch(r.stderr)
			if len(m) != 1 || (mode == "forked") != (fm != nil) {
				t.Fatalf("the processes traced are not the ones run; stderr:\n%s", r.stderr)
			}
			pid := m[0][1]
			if fm != nil {
				pid = fm[1]
			}
			notice := fmt.Sprintf("mdtrace: process %s (%s): its main thread ended (pthread_exit) while its other threads run on: its reports are written once the whole process has ended, with its maps as they are now (libraries it loads from now on stay unnamed)", pid, prog("leaderexit"))
			// mdtrace's notices are logged under the first process's PID.
			var msgs, all []string
			for _, line := range strings.Split(r.stderr, "\n") {
				if lm := logRe.FindStringSubmatch(line); lm != nil {
					all = append(all, lm[4])
					if lm[1] == pid {
						msgs = append(msgs, lm[4])
					}
				}
			}
			if !slices.Contains(all, notice) {
				t.Errorf("no line %q; stderr:\n%s", notice, r.stderr)
			}
			report := normalizeLeakReport(t, msgs, prog("leaderexit"))
			total := strings.Count(report, "+++ ")
			want := []string{
				"leaked block of size 1111 at 0xPTR (leak %d of %d)\nBacktrace at time of allocation:\n" +
					"          #00  pc PC  leaderexit (leader_leak+OFF)\n          #01  pc PC  leaderexit (run+OFF)\n          #02  pc PC  leaderexit (main+OFF)\n",
				"leaked block of size 2222 at 0xPTR (leak %d of %d)\nBacktrace at time of allocation:\n" +
					"          #00  pc PC  leaderexit (thread_leak_one+OFF)\n          #01  pc PC  leaderexit (outlive+OFF)\n",
				"leaked block of size 2223 at 0xPTR (leak %d of %d)\nBacktrace at time of allocation:\n" +
					"          #00  pc PC  leaderexit (thread_leak_two+OFF)\n          #01  pc PC  leaderexit (outlive+OFF)\n",
				"leaked block of size 2224 at 0xPTR (leak %d of %d)\nBacktrace at time of allocation:\n" +
					"          #00  pc PC  leaderexit (thread_leak_three+OFF)\n          #01  pc PC  leaderexit (outlive+OFF)\n",
			}
			for _, w := range want {
				found := false
				for n := 1; n <= total && !found; n++ {
					found = strings.Contains(report, fmt.Sprintf(w, n, total))
				}
				if !found {
					t.Errorf("no leak\n%s\nin the report:\n%s", strings.ReplaceAll(w, "%d", "N"), report)
				}
			}
			// glibc's own blocks for pthread_exit (libgcc_s, loaded by it)
			// are the others.
			if total < 4 || !strings.Contains(report, fmt.Sprintf(" in %d leaked allocations", total)) {
				t.Errorf("%d leaks listed, and no bottom line that counts them:\n%s", total, report)
			}
		})
	}
}

// waitLeaderGone waits until the main thread of process pid has ended
// (state Z) while the process runs on.
func waitLeaderGone(t *testing.T, pid string) {
	t.Helper()
	for i := 0; ; i++ {
		stat := readFile(t, "/proc/"+pid+"/stat")
		// The state follows the command name.
		if f := strings.Fields(stat[strings.LastIndex(stat, ")")+1:]); f[0] == "Z" {
			return
		}
		if i == 100 {
			t.Fatalf("the main thread of %s did not end", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAttachLeaderGone: mdtrace -p on a process whose main thread has
// ended, its other thread running on, says so and fails, held or not (the
// kernel shows nothing of it under /proc/PID); held from before, the
// process is reported once it has ended, with the leaks made before its
// main thread ended.
func TestAttachLeaderGone(t *testing.T) {
	needRoot(t)
	t.Run("after", func(t *testing.T) {
		target := start(t, prog("attachee"), "leader-exit")
		target.expectLine(t, "ready")
		pid := fmt.Sprint(target.cmd.Process.Pid)
		io.WriteString(target.stdin, "go\n")
		target.expectLine(t, "done")
		io.WriteString(target.stdin, "end\n")
		waitLeaderGone(t, pid)
		want := fmt.Sprintf("mdtrace: process %s runs on without its main thread, which has ended (pthread_exit): the kernel ties the probes of a process to that thread, and shows no program, maps or memory of it under /proc/%s; mdtrace -p cannot trace it (mdtrace --all lists it)\n", pid, pid)
		for _, args := range [][]string{{"-p", pid}, {"-p", pid, "--hold"}} {
			r := runMdtrace(t, args...)
			if r.code != 1 || !strings.HasSuffix(r.stderr, want) {
				t.Errorf("mdtrace %v: exit code %d, stderr:\n%s\nwant 1 and the end:\n%s", args, r.code, r.stderr, want)
			}
		}
		target.stdin.Close()
		if code := target.wait(t); code != 0 {
			t.Errorf("attachee exit status %d", code)
		}
	})
	t.Run("held", func(t *testing.T) {
		dir := t.TempDir()
		target := start(t, prog("attachee"), "leader-exit")
		target.expectLine(t, "ready")
		pid := fmt.Sprint(target.cmd.Process.Pid)
		m := start(t, mdtraceBin, "-p", pid, "--hold", "-o", "backtrace leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
		waitReady(t, m, dir+"/ready")
		io.WriteString(target.stdin, "go\n")
		target.expectLine(t, "done")
		io.WriteString(target.stdin, "end\n")
		waitLeaderGone(t, pid)
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
		msgs := logMessages(t, readFile(t, dir+"/log"), pid)
		notice := fmt.Sprintf("mdtrace: process %s (%s): its main thread ended (pthread_exit) while its other threads run on: its reports are written once the whole process has ended, with its maps as they are now (libraries it loads from now on stay unnamed)", pid, prog("attachee"))
		if !slices.Contains(msgs, notice) {
			t.Errorf("no line %q in the log:\n%s", notice, strings.Join(msgs, "\n"))
		}
		report := normalizeLeakReport(t, msgs, prog("attachee"))
		for _, w := range []string{
			"leaked block of size 3001 at 0xPTR (leak ",
			"leaked block of size 3002 at 0xPTR (leak ",
			"leaked block of size 3003 at 0xPTR (leak ",
		} {
			if !strings.Contains(report, w) {
				t.Errorf("no %q in the report:\n%s", w, report)
			}
		}
	})
}

// TestAllLeaderGone: --all lists a process whose main thread has ended,
// its other thread running on, under its own program, not ended, with the
// blocks that thread allocated and their sites named (the kernel shows its
// program and maps only through that thread). Before, it was listed as
// ended, under its parent's program (bash), its frames unnamed.
func TestAllLeaderGone(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--all", "--backtrace", "--sample-bytes", "0", "--format", "json", "--interval", "300ms", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	target := start(t, prog("leaderexit"), "hold")
	target.expectLine(t, "leader gone")
	pid := target.cmd.Process.Pid
	waitLeaderGone(t, fmt.Sprint(pid))
	// A scan (once a second) reads it meanwhile, without its main
	// thread: the walks of what its other thread allocates then go
	// through the unwind tables placed from the maps read.
	time.Sleep(1500 * time.Millisecond)
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "outlived")
	out := m.interrupt(t)
	a, _ := lastSummary(t, out)
	i := slices.IndexFunc(a.Ranking, func(r auditRow) bool { return r.PID == pid })
	if i < 0 {
		t.Fatalf("process %d was never listed:\n%s", pid, out)
	}
	r := a.Ranking[i]
	if r.Exe != prog("leaderexit") || r.Comm != "leaderexit" || r.Exited {
		t.Errorf("row %+v, want %s, leaderexit, not exited", r, prog("leaderexit"))
	}
	for _, w := range []struct {
		fn    string
		bytes int64
	}{{"thread_leak_one", 2222}, {"thread_leak_two", 2223}, {"thread_leak_three", 2224}} {
		found := false
		for _, s := range r.Sites {
			if fns := s.functions(); len(fns) > 1 && slices.Contains(fns, w.fn) && s.Blocks == 1 && s.Bytes == w.bytes {
				found = true
			}
		}
		if !found {
			t.Errorf("no site of 1 block, %d bytes, through %s, in %+v", w.bytes, w.fn, r.Sites)
		}
	}
	target.stdin.Close()
	if code := target.wait(t); code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
}

// TestProgramLeaderExitsFirst: in program mode too, a process whose main
// thread ends first is reported when it ends, with its other thread's
// leaks, as soon as it ends. The program waits until mdtrace holds it: one
// that ends before is reported from the table, unnamed, and said to be
// (leaderexit lived about a millisecond, and was held in time 9 runs in 12).
func TestProgramLeaderExitsFirst(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	logPath := dir + "/log"
	m := start(t, mdtraceBin, "--program", "leaderexit", "-o", "backtrace leak_track", "--log", logPath, "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	target := start(t, prog("leaderexit"), "traced")
	target.expectLine(t, "outlived")
	if code := target.wait(t); code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	pid := target.cmd.Process.Pid
	// Written once it is gone, before mdtrace ends.
	for i := 0; !strings.Contains(processLog(readFile(t, logPath), pid), " leaked allocations"); i++ {
		if i == 600 {
			t.Fatalf("no report of process %d:\n%s", pid, readFile(t, logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := readFile(t, logPath)
	notice := fmt.Sprintf("mdtrace: process %d (%s): its main thread ended (pthread_exit) while its other threads run on: its reports are written once the whole process has ended, with its maps as they are now (libraries it loads from now on stay unnamed)", pid, prog("leaderexit"))
	if !slices.Contains(logMessages(t, log, ""), notice) {
		t.Errorf("no line %q in the log:\n%s", notice, log)
	}
	report := normalizeLeakReport(t, logMessages(t, processLog(log, pid), fmt.Sprint(pid)), prog("leaderexit"))
	for _, fn := range []string{"thread_leak_one", "thread_leak_two", "thread_leak_three", "leader_leak"} {
		if !strings.Contains(report, "          #00  pc PC  leaderexit ("+fn+"+OFF)\n") {
			t.Errorf("no leak from %s in the report:\n%s", fn, report)
		}
	}
}
