package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEarlyStart: in the default launch mode the command starts while
// mdtrace loads its programs, its shim holding every batch until mdtrace
// has probed the process. testdata/early makes all its calls then: a
// program done before mdtrace is ready (its "early: done" comes before
// mdtrace's tracing line), one whose batch fills or whose frees pass the
// bound a thread may hold and so waits for mdtrace, one that ends with
// _exit while a thread's batch and its own are held, a fork (its child
// held until mdtrace is ready, then told) and an exec made before mdtrace
// is ready. Every block is reported, exactly.
func TestEarlyStart(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		args   string
		before bool     // the program's work is done before mdtrace is ready
		lines  []string // mdtrace's lines on standard error, after the first tracing line
		sizes  map[int]int
		frames map[string]int
	}{
		{"keep 200", true, []string{"mdtrace: 29900 bytes in 200 leaked allocations"}, nil, map[string]int{"(early_keep+": 200}},
		{"keep 3000", false, []string{"mdtrace: 448500 bytes in 3000 leaked allocations"}, map[int]int{100: 30, 199: 30}, map[string]int{"(early_keep+": 3000}},
		{"churn 20000", false, []string{"mdtrace: 2000 bytes in 10 leaked allocations"}, map[int]int{200: 10, 48: 0}, map[string]int{"(early_keep+": 10}},
		{"_exit 200", true, []string{"mdtrace: 66000 bytes in 202 leaked allocations (1 suppressed, 288 bytes)"}, map[int]int{300: 200, 3000: 2},
			map[string]int{"(early_thread+": 200, "(early_main+": 2}},
		{"fork 150", false, []string{"mdtrace: tracing process CHILD, forked from PID", "mdtrace: 44850 bytes in 305 leaked allocations in 2 processes"},
			map[int]int{500: 5}, map[string]int{"(early_child+": 5, "(early_keep+": 305}},
		{"exec 150", true, []string{"mdtrace: 510 bytes in 5 leaked allocations"}, map[int]int{100: 1, 104: 1}, map[string]int{"(early_keep+": 5}},
	} {
		t.Run(strings.Fields(tc.args)[0], func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, append([]string{"-o", "backtrace leak_track", "--log", logPath, "--", prog("early")}, strings.Fields(tc.args)...)...)
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			var mine []string
			first, done := -1, -1
			for i, l := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
				switch {
				case strings.HasPrefix(l, "mdtrace: tracing process ") && first < 0 && !strings.Contains(l, "forked from"):
					first = i
				case l == "early: done":
					if done < 0 {
						done = i
					}
				case strings.HasPrefix(l, "mdtrace: "):
					mine = append(mine, l)
				}
			}
			if first < 0 {
				t.Fatalf("no tracing line; stderr:\n%s", r.stderr)
			}
			if done < 0 || (done < first) != tc.before {
				t.Errorf("the program's work done before mdtrace was ready: %v, want %v; stderr:\n%s", done >= 0 && done < first, tc.before, r.stderr)
			}
			want := strings.Join(tc.lines, "\n")
			if len(mine) > 0 && strings.Contains(mine[0], "forked from") {
				// The pids are not known in advance.
				var child, parent int
				fmt.Sscanf(mine[0], "mdtrace: tracing process %d, forked from %d", &child, &parent)
				want = strings.NewReplacer("CHILD", fmt.Sprint(child), "PID", fmt.Sprint(parent)).Replace(want)
			}
			if got := strings.Join(mine, "\n"); got != want {
				t.Errorf("mdtrace's lines:\n%s\nwant:\n%s", got, want)
			}
			checkLeaks(t, readFile(t, logPath), tc.sizes, tc.frames)
		})
	}
}

// checkLeaks checks the leaks a log lists: for each size, how many blocks
// of that size, and for each frame, how many lines name it.
func checkLeaks(t *testing.T, log string, sizes map[int]int, frames map[string]int) {
	t.Helper()
	for size, n := range sizes {
		if got := strings.Count(log, fmt.Sprintf("leaked block of size %d ", size)); got != n {
			t.Errorf("%d leaks of %d bytes, want %d", got, size, n)
		}
	}
	for frame, n := range frames {
		if got := strings.Count(log, frame); got != n {
			t.Errorf("%d lines with %q, want %d", got, frame, n)
		}
	}
}

// TestEarlyStartTracerKilled: mdtrace killed before it is ready.
//   - early: the command it started early has a batch full and waits for
//     mdtrace; its shim looks for mdtrace by its pid, finds it gone, says so
//     and goes on at once (it waited 30 s for nothing before).
//   - held (--no-batch): the command is held at its exec by job control
//     (a stop its tracer's death leaves in place); mdtrace's death sends it
//     SIGCONT, and it runs (it stayed stopped for ever before).
func TestEarlyStartTracerKilled(t *testing.T) {
	needRoot(t)
	t.Run("early", func(t *testing.T) {
		tracerKilled(t, nil, []string{"early: done", "mdtrace ended before it was ready: the calls held until now may be missing"})
	})
	t.Run("held", func(t *testing.T) {
		tracerKilled(t, []string{"--no-batch"}, []string{"early: done"})
	})
}

// tracerKilled runs testdata/early under mdtrace with opts, kills mdtrace
// 20 ms after the command executed its program, and wants the
// command to end within 5 s with each of lines in the output.
func tracerKilled(t *testing.T, opts []string, lines []string) {
	var out bytes.Buffer
	cmd := exec.Command(mdtraceBin, append(opts, "--", prog("early"), "keep", "3000")...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A child is listed under the thread that forked it; the first may
	// be the loader, asked which libraries the command needs.
	children := fmt.Sprintf("/proc/%d/task/*/children", cmd.Process.Pid)
	state := func(pid string) string {
		b, _ := os.ReadFile("/proc/" + pid + "/stat")
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
			return string(b[i+2])
		}
		return ""
	}
	child := ""
	deadline := time.Now().Add(5 * time.Second)
	for {
		var pids []string
		files, _ := filepath.Glob(children)
		for _, f := range files {
			b, _ := os.ReadFile(f)
			pids = append(pids, strings.Fields(string(b))...)
		}
		// The command, named early from its exec on.
		if i := slices.IndexFunc(pids, func(pid string) bool {
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			return strings.TrimSpace(string(comm)) == "early"
		}); i >= 0 {
			child = pids[i]
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("mdtrace started no command in 5 s; output:\n%s", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	// It is first stopped at its exec by PTRACE_TRACEME's SIGTRAP, which
	// a tracer's death would deliver (for a few microseconds), then by job
	// control: held while mdtrace loads (a hundred milliseconds and more),
	// or let go at once in an early start, to wait for mdtrace once its
	// batch is full.
	time.Sleep(20 * time.Millisecond)
	cmd.Process.Kill()
	killed := time.Now()
	// Wait returns once the command, which shares the output, is done too.
	waited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		st := state(child)
		pid, _ := strconv.Atoi(child)
		syscall.Kill(pid, syscall.SIGKILL)
		<-waited
		t.Fatalf("the command (state %s) had not ended 10 s after mdtrace was killed; output:\n%s", st, out.String())
	}
	if took := time.Since(killed); took > 5*time.Second {
		t.Errorf("the command ended %v after mdtrace was killed, want within 5 s", took)
	}
	for _, want := range lines {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in the output (the command, %s, in state %s):\n%s", want, child, state(child), out.String())
		}
	}
}
