//go:build linux

package e2e

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mdtrace/mdtrace/options"
)

// TestVerboseLines: Android's verbose lines, in Android's order, naming the
// PID the signals go to: mdtrace's own with probes on glibc, the traced
// process's when the shim (which handles them there) is preloaded.
func TestVerboseLines(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "verbose backtrace_enable_on_signal record_allocs log_allocator_stats_on_signal",
				"--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("leaky"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(readFile(t, dir+"/ready")))
			var got []string
			re := regexp.MustCompile(`'kill -(\d+) (\d+)'`)
			for _, m := range logMessages(t, readFile(t, dir+"/log"), "") {
				if sm := re.FindStringSubmatch(m); sm != nil {
					target, _ := strconv.Atoi(sm[2])
					if (target == pid) != (mode.name != "no-preload") {
						t.Errorf("%q names PID %d; the traced process is %d", m, target, pid)
					}
					m = strings.Replace(m, sm[2], "PID", 1)
				}
				if strings.Contains(m, "Run:") || strings.Contains(m, "enabled") {
					got = append(got, m)
				}
			}
			p := prog("leaky")
			want := []string{
				p + ": Run: 'kill -45 PID' to enable backtracing.",
				p + ": Run: 'kill -47 PID' to dump the backtrace.",
				p + ": Run: 'kill -46 PID' to dump the allocation records.",
				p + ": Run: 'kill -49 PID' to log allocator stats.",
				p + ": malloc debug enabled",
			}
			if !slices.Equal(got, want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestAllocatorStatsSignal49: signal 49 to mdtrace logs its statistics of
// the traced process at once.
func TestAllocatorStatsSignal49(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--no-preload", "-o", "log_allocator_stats_on_signal", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("leaky"), "hold")
	m.expectLine(t, "leaky: done")
	waitFile(t, dir+"/ready")
	m.cmd.Process.Signal(syscall.Signal(options.LogAllocatorStatsSignal))
	for i := 0; i < 200 && !strings.Contains(readFile(t, dir+"/log"), "live blocks by size"); i++ {
		sleepBriefly()
	}
	m.stdin.Close()
	if code := m.wait(t); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	msgs := logMessages(t, readFile(t, dir+"/log"), strings.TrimSpace(readFile(t, dir+"/ready")))
	p := prog("leaky")
	if len(msgs) != 4 || msgs[0] != "Logging allocator stats..." || msgs[1] != p+": 13 live blocks, 16194 bytes" ||
		!strings.HasPrefix(msgs[2], p+": ") ||
		msgs[3] != p+": live blocks by size: <=16: 0, <=64: 0, <=256: 0, <=1K: 12, <=4K: 1, <=16K: 0, <=64K: 0, <=256K: 0, <=1M: 0, >1M: 0" {
		t.Errorf("log:\n%s", strings.Join(msgs, "\n"))
	}
}
