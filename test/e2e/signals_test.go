//go:build linux

package e2e

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/options"
)

// TestSignal45TogglesBacktraces: with backtrace_enable_on_signal alone,
// capture starts off, and signal 45 sent to mdtrace turns it on; with the
// backtrace option too, it starts on and 45 turns it off. In both launch
// modes. A heap dump (47) after the 45 tells that the 45 was handled.
func TestSignal45TogglesBacktraces(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		for _, tc := range []struct {
			opts         string
			toggle, want bool
		}{
			{"backtrace_enable_on_signal", false, false},
			{"backtrace_enable_on_signal", true, true},
			{"backtrace backtrace_enable_on_signal", false, true},
			{"backtrace backtrace_enable_on_signal", true, false},
		} {
			toggle := tc.toggle
			t.Run(fmt.Sprintf("%s/%s/toggle=%v", mode.name, tc.opts, toggle), func(t *testing.T) {
				dir := t.TempDir()
				m := start(t, mdtraceBin, modeFlag(mode.flag), "-o", tc.opts+" leak_track backtrace_dump_prefix="+dir+"/h",
					"--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("attachee"))
				m.expectLine(t, "ready")
				waitFile(t, dir+"/ready")
				pid := strings.TrimSpace(readFile(t, dir+"/ready"))
				if toggle {
					m.cmd.Process.Signal(syscall.Signal(options.BacktraceEnableSignal))
				}
				m.cmd.Process.Signal(syscall.Signal(options.BacktraceDumpSignal))
				waitFile(t, fmt.Sprintf("%s/h.%s.txt", dir, pid))
				io.WriteString(m.stdin, "go\n")
				m.expectLine(t, "done")
				m.stdin.Close()
				if code := m.wait(t); code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", code, m.stderr.String())
				}
				report := normalizeLeakReport(t, logMessages(t, readFile(t, dir+"/log"), pid), prog("attachee"))
				want := "+++ testdata/attachee leaked block of size 3003 at 0xPTR (leak 1 of 3)\n" +
					"+++ testdata/attachee leaked block of size 3002 at 0xPTR (leak 2 of 3)\n" +
					"+++ testdata/attachee leaked block of size 3001 at 0xPTR (leak 3 of 3)\n"
				if tc.want {
					want = "+++ testdata/attachee leaked block of size 3003 at 0xPTR (leak 1 of 3)\n" +
						"Backtrace at time of allocation:\n" +
						"          #00  pc PC  attachee (attach_leak_three+OFF)\n" +
						"          #01  pc PC  attachee (main+OFF)\n" +
						"+++ testdata/attachee leaked block of size 3002 at 0xPTR (leak 2 of 3)\n" +
						"Backtrace at time of allocation:\n" +
						"          #00  pc PC  attachee (attach_leak_two+OFF)\n" +
						"          #01  pc PC  attachee (main+OFF)\n" +
						"+++ testdata/attachee leaked block of size 3001 at 0xPTR (leak 3 of 3)\n" +
						"Backtrace at time of allocation:\n" +
						"          #00  pc PC  attachee (attach_leak_one+OFF)\n" +
						"          #01  pc PC  attachee (main+OFF)\n"
				}
				want += "mdtrace: 9006 bytes in 3 leaked allocations\n"
				// The dump line comes first.
				_, report, _ = strings.Cut(report, "\n")
				if report != want {
					t.Errorf("leak report:\n%s\nwant:\n%s", report, want)
				}
			})
		}
	}
}

// TestSignal45AtNextAllocation: backtraces toggled on by signal 45 take
// effect at the next allocation in every launch mode, also for the shim's
// batches, which reach the probes later: the block allocated before the
// toggle has no backtrace, the one after has its own.
func TestSignal45AtNextAllocation(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			m := start(t, mdtraceBin, modeFlag(mode.flag), "-o", "backtrace_enable_on_signal leak_track backtrace_dump_prefix="+dir+"/h",
				"--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("toggle"))
			m.expectLine(t, "ready")
			waitFile(t, dir+"/ready")
			pid := strings.TrimSpace(readFile(t, dir+"/ready"))
			// 45 comes before 47 (the lower real-time signal first): once
			// the dump is there, backtraces are on.
			m.cmd.Process.Signal(syscall.Signal(options.BacktraceEnableSignal))
			m.cmd.Process.Signal(syscall.Signal(options.BacktraceDumpSignal))
			waitFile(t, fmt.Sprintf("%s/h.%s.txt", dir, pid))
			io.WriteString(m.stdin, "go\n")
			m.expectLine(t, "done")
			m.stdin.Close()
			if code := m.wait(t); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			report := normalizeLeakReport(t, logMessages(t, readFile(t, dir+"/log"), pid), prog("toggle"))
			_, report, _ = strings.Cut(report, "\n") // the dump's line
			want := "+++ testdata/toggle leaked block of size 2222 at 0xPTR (leak 1 of 2)\n" +
				"Backtrace at time of allocation:\n" +
				"          #00  pc PC  toggle (leak_after+OFF)\n" +
				"          #01  pc PC  toggle (main+OFF)\n" +
				"+++ testdata/toggle leaked block of size 1111 at 0xPTR (leak 2 of 2)\n" +
				"mdtrace: 3333 bytes in 2 leaked allocations\n"
			if report != want {
				t.Errorf("leak report:\n%s\nwant:\n%s", report, want)
			}
		})
	}
}

// TestSignal45AcrossExec: backtraces toggled on by signal 45 stay on in a
// program a traced process executes afterwards, whose shim starts from the
// options' state: mdtrace gives it the toggled one when the loader says it
// is loaded. The block the program leaks once it has said "ready" has its
// backtrace in every launch mode.
func TestSignal45AcrossExec(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			m := start(t, mdtraceBin, modeFlag(mode.flag), "-o", "backtrace_enable_on_signal leak_track backtrace_dump_prefix="+dir+"/h",
				"--log", dir+"/log", "--ready-file", dir+"/ready", "--", "sh", "-c", "read line && exec "+prog("toggle"))
			waitFile(t, dir+"/ready")
			pid := strings.TrimSpace(readFile(t, dir+"/ready"))
			// 45 comes before 47: once the dump is there, backtraces are on.
			m.cmd.Process.Signal(syscall.Signal(options.BacktraceEnableSignal))
			m.cmd.Process.Signal(syscall.Signal(options.BacktraceDumpSignal))
			waitFile(t, fmt.Sprintf("%s/h.%s.txt", dir, pid))
			io.WriteString(m.stdin, "exec\n")
			m.expectLine(t, "ready")
			// The loader's notice of the new program's libraries is read
			// within milliseconds; its shim then has the toggled state.
			time.Sleep(200 * time.Millisecond)
			io.WriteString(m.stdin, "go\n")
			m.expectLine(t, "done")
			m.stdin.Close()
			if code := m.wait(t); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			report := normalizeLeakReport(t, logMessages(t, readFile(t, dir+"/log"), ""), prog("toggle"))
			want := "+++ testdata/toggle leaked block of size 2222 at 0xPTR (leak 1 of 2)\n" +
				"Backtrace at time of allocation:\n" +
				"          #00  pc PC  toggle (leak_after+OFF)\n" +
				"          #01  pc PC  toggle (main+OFF)\n"
			if !strings.Contains(report, want) {
				t.Errorf("leak report:\n%s\nwant in it:\n%s", report, want)
			}
		})
	}
}

// signalsActedOn counts, in a log, the signals sig that mdtrace acted on:
// each line of an action is one, but where a line says the signal came N
// times, which is N.
func signalsActedOn(t *testing.T, log, action string, sig int) int {
	t.Helper()
	merged := regexp.MustCompile(fmt.Sprintf(`^mdtrace: signal %d came ([0-9]+) times while mdtrace was busy: `, sig))
	n := 0
	for _, m := range logMessages(t, log, "") {
		if strings.HasPrefix(m, action) {
			n++
		}
		if g := merged.FindStringSubmatch(m); g != nil {
			k, _ := strconv.Atoi(g[1])
			n += k - 1
		}
	}
	return n
}

// TestSignalBurst: 100 × signal 47 sent to mdtrace as fast as it can be:
// the Go runtime merges those that come before mdtrace takes them, and the
// log says how many each heap dump stood for: 100 in all, no more and no
// less.
func TestSignalBurst(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "-o", "backtrace leak_track backtrace_dump_prefix="+dir+"/h",
		"--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("attachee"))
	m.expectLine(t, "ready")
	waitFile(t, dir+"/ready")
	for i := 0; i < 100; i++ {
		m.cmd.Process.Signal(syscall.Signal(options.BacktraceDumpSignal))
	}
	n := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n = signalsActedOn(t, readFile(t, dir+"/log"), "Dumping to file: ", options.BacktraceDumpSignal); n >= 100 {
			break
		}
	}
	io.WriteString(m.stdin, "go\n")
	m.expectLine(t, "done")
	m.stdin.Close()
	if code := m.wait(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := readFile(t, dir+"/log")
	if n = signalsActedOn(t, log, "Dumping to file: ", options.BacktraceDumpSignal); n != 100 {
		t.Errorf("%d signals acted on, want 100; log:\n%s", n, log)
	}
	t.Logf("%d heap dumps for 100 signals", strings.Count(log, "Dumping to file: "))
}

// TestSignal45EvenBurst: signal 45 sent an even number of times, as fast
// as it can be, leaves backtraces as they were, however many of them the
// Go runtime merges; an odd number toggles them.
func TestSignal45EvenBurst(t *testing.T) {
	needRoot(t)
	for _, times := range []int{10, 11} {
		t.Run(fmt.Sprintf("%d", times), func(t *testing.T) {
			dir := t.TempDir()
			m := start(t, mdtraceBin, "-o", "backtrace backtrace_enable_on_signal leak_track backtrace_dump_prefix="+dir+"/h",
				"--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("attachee"))
			m.expectLine(t, "ready")
			waitFile(t, dir+"/ready")
			pid := strings.TrimSpace(readFile(t, dir+"/ready"))
			for i := 0; i < times; i++ {
				m.cmd.Process.Signal(syscall.Signal(options.BacktraceEnableSignal))
			}
			// The toggles that came before the dump are applied first.
			m.cmd.Process.Signal(syscall.Signal(options.BacktraceDumpSignal))
			waitFile(t, fmt.Sprintf("%s/h.%s.txt", dir, pid))
			io.WriteString(m.stdin, "go\n")
			m.expectLine(t, "done")
			m.stdin.Close()
			if code := m.wait(t); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			report := normalizeLeakReport(t, logMessages(t, readFile(t, dir+"/log"), pid), prog("attachee"))
			backtraces := strings.Count(report, "Backtrace at time of allocation:")
			if want := map[int]int{10: 3, 11: 0}[times]; backtraces != want {
				t.Errorf("%d backtraces, want %d; report:\n%s", backtraces, want, report)
			}
		})
	}
}
