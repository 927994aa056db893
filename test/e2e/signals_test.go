//go:build linux

package e2e

import (
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"

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
