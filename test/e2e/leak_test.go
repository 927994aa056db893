//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHandoffLeaks: blocks passed between threads, which each hand their
// calls over a batch at a time in the default mode, and a process that
// ends while its threads' batches hold calls, with exit and with _exit, or
// forks a child then, which ends at once; and blocks that the consumers
// grow with realloc, at the shim's unbatched site, while their allocation
// may still be in the producer's batch.
// Every mode reports the same leaks of the program's own.
func TestHandoffLeaks(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		for _, end := range []string{"exit", "_exit", "fork", "exit realloc"} {
			t.Run(mode.name+"/"+strings.ReplaceAll(end, " ", "_"), func(t *testing.T) {
				dir := t.TempDir()
				logPath := filepath.Join(dir, "log")
				args := append([]string{"--", prog("handoff"), "10000", "3", "2", "4"}, strings.Fields(end)...)
				r := runMdtrace(t, append([]string{modeFlag(mode.flag), "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix=" + dir + "/heap",
					"--log", logPath}, args...)...)
				if r.code != 0 || r.stdout != "handoff 10000 3 2 4\n" {
					t.Fatalf("exit status %d, output %q; stderr:\n%s", r.code, r.stdout, r.stderr)
				}
				// With fork, the child's report too: its copy of the
				// parent's blocks, and of the other threads' last calls.
				procs := 1
				if end == "fork" {
					procs = 2
				}
				// The tracing lines, then the run's bottom line.
				bottom := "mdtrace: 54000 bytes in 14 leaked allocations ("
				if procs == 2 {
					bottom = "mdtrace: 108000 bytes in 28 leaked allocations ("
				}
				lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
				if want := "mdtrace: tracing process "; !strings.HasPrefix(r.stderr, want) || len(lines) != procs+1 || !strings.HasPrefix(lines[procs], bottom) {
					t.Errorf("stderr, want only the tracing lines and %q...:\n%s", bottom, r.stderr)
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

// TestPingPongLeaks: one block at a time passed from main to a second
// thread, which frees it, so that glibc hands main the same few blocks
// over and over: in the default mode, each address is freed tens of times
// in the second thread's batches before main's batch with its allocations
// comes, more often than the probes have ways to keep a free apart
// (abi.OrphanWays). Every mode reports the program's own leaks, and no
// free lost, whether main ends with its batch handed over or not, and
// whether the blocks are grown at the shim's unbatched realloc site.
func TestPingPongLeaks(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		for _, end := range []string{"exit", "_exit", "exit realloc", "_exit realloc"} {
			t.Run(mode.name+"/"+strings.ReplaceAll(end, " ", "_"), func(t *testing.T) {
				logPath := filepath.Join(t.TempDir(), "log")
				args := append([]string{"--", prog("pingpong"), "20000"}, strings.Fields(end)...)
				r := runMdtrace(t, append([]string{modeFlag(mode.flag), "-o", "backtrace leak_track", "--log", logPath}, args...)...)
				if r.code != 0 || r.stdout != "pingpong 20000\n" {
					t.Fatalf("exit status %d, output %q; stderr:\n%s", r.code, r.stdout, r.stderr)
				}
				lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
				if len(lines) != 2 || !strings.HasPrefix(lines[0], "mdtrace: tracing process ") ||
					!strings.HasPrefix(lines[1], "mdtrace: 6000 bytes in 2 leaked allocations (") {
					t.Errorf("stderr, want the tracing line and 6000 bytes in 2 leaked allocations:\n%s", r.stderr)
				}
				log := readFile(t, logPath)
				for _, want := range []struct {
					what string
					n    int
				}{{"leaked block of size 3000 ", 2}, {"(pingpong_keep+", 2}, {"(pingpong_make+", 0}, {"(pingpong_take+", 0}} {
					if n := strings.Count(log, want.what); n != want.n {
						t.Errorf("%d lines with %q, want %d", n, want.what, want.n)
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
	want += "mdtrace: 16194 bytes in 13 leaked allocations\n"
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

// TestSuppressions: the leak report leaves out the runtimes' own blocks
// by default (libstdc++'s emergency pool, stdout's buffer), and those a
// suppression file names by function, source file or library; the bottom
// line counts both sides. Bad files are refused.
func TestSuppressions(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	byFunc := file("func.supp", "# Tree's nodes\nleak:Tree::grow\n")
	bySource := file("source.supp", "leak:cxxchain.cc$\n")
	for _, tc := range []struct {
		flags  []string
		bottom string
		blocks int
	}{
		{nil, "mdtrace: 568 bytes in 11 leaked allocations (2 suppressed, 76800 bytes)", 11},
		{[]string{"--no-default-suppressions"}, "mdtrace: 77368 bytes in 13 leaked allocations", 13},
		{[]string{"--suppressions", byFunc}, "mdtrace: 8 bytes in 1 leaked allocations (12 suppressed, 77360 bytes)", 1},
		{[]string{"--suppressions", bySource}, "mdtrace: 0 bytes in 0 leaked allocations (13 suppressed, 77368 bytes)", 0},
	} {
		for _, mode := range launchModes {
			t.Run(mode.name+fmt.Sprint(tc.flags), func(t *testing.T) {
				logPath := filepath.Join(t.TempDir(), "log")
				r := runMdtrace(t, append(append([]string{modeFlag(mode.flag)}, tc.flags...), "-o", "backtrace leak_track", "--log", logPath, "--", prog("cxxchain"))...)
				lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
				if r.code != 0 || lines[len(lines)-1] != tc.bottom {
					t.Fatalf("exit status %d, stderr:\n%s\nwant the last line %q", r.code, r.stderr, tc.bottom)
				}
				msgs := logMessages(t, readFile(t, logPath), "")
				if n := strings.Count(strings.Join(msgs, "\n"), "cxxchain leaked block"); n != tc.blocks || msgs[len(msgs)-1] != tc.bottom {
					t.Errorf("%d blocks in the log, want %d, and its last line %q: %q", n, tc.blocks, tc.bottom, msgs[len(msgs)-1])
				}
			})
		}
	}
	r := runMdtrace(t, "--suppressions", byFunc, "--print-suppressions")
	if !strings.HasPrefix(r.stdout, "# mdtrace's built-in suppressions") || !strings.HasSuffix(r.stdout, "\nleak:Tree::grow  # "+byFunc+":2\n") || r.code != 0 {
		t.Errorf("--print-suppressions: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	r = runMdtrace(t, "--no-default-suppressions", "--suppressions", byFunc, "--print-suppressions")
	if want := "leak:Tree::grow  # " + byFunc + ":2\n"; r.stdout != want || r.code != 0 {
		t.Errorf("--print-suppressions without the defaults: exit %d, stdout %q, want %q", r.code, r.stdout, want)
	}
	for path, want := range map[string]string{
		file("race.supp", "race:foo\n"):    "mdtrace: " + dir + "/race.supp:1: suppression type \"race\": mdtrace reports leaks only (leak:PATTERN)\n",
		filepath.Join(dir, "missing.supp"): "mdtrace: suppressions: open " + dir + "/missing.supp: no such file or directory\n",
	} {
		r := runMdtrace(t, "--suppressions", path, "--", prog("cxxchain"))
		if r.code != 1 || r.stderr != want {
			t.Errorf("--suppressions %s: exit %d, stderr %q, want 1 and %q", path, r.code, r.stderr, want)
		}
	}
}

// TestOptionValueAfterSpace: an option whose value is optional takes it
// after '=' only; given after a space, the value would be run as the
// command, and mdtrace says how to write it.
func TestOptionValueAfterSpace(t *testing.T) {
	r := runMdtrace(t, "--backtrace", "32", "--", prog("leaky"))
	if want := "mdtrace: --backtrace takes its value after '=': use --backtrace=32 (\"32\" would be run as the command)\n"; r.code != 2 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("exit %d, stderr %q, want 2 and %q", r.code, r.stderr, want)
	}
}

// TestReportProgress: a leak report of many blocks tells a person at a
// terminal how far it is, on a line redrawn in place, and where it
// wrote; without a terminal, nothing but the bottom line.
func TestReportProgress(t *testing.T) {
	needRoot(t)
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script (util-linux) to give mdtrace a terminal")
	}
	dir := t.TempDir()
	// 140,000 blocks live at exit.
	cmd := exec.Command(script, "-qec", fmt.Sprintf("%s -o 'backtrace leak_track' --log %s/log -- %s 14 20000 0", mdtraceBin, dir, prog("grower")), "/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	text := strings.ReplaceAll(string(out), "\r\x1b[K", "\n")
	for _, want := range []string{
		": reading the leak report: 65536 of 140000 blocks\n",
		": writing the leak report: 131072 of 140000 blocks\n",
		": leak report of 140000 blocks written to " + dir + "/log\r\n",
		"mdtrace: 15400000 bytes in 140000 leaked allocations\r\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, text)
		}
	}
	r := runMdtrace(t, "-o", "backtrace leak_track", "--log", dir+"/log2", "--", prog("grower"), "14", "20000", "0")
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); r.code != 0 || len(lines) != 2 || lines[1] != "mdtrace: 15400000 bytes in 140000 leaked allocations" {
		t.Errorf("without a terminal: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestMaxLeaks: --max-leaks N lists the first N leaks in Android's format,
// numbered of all of them, then the rest by backtrace, most bytes first,
// and the bottom line counts them all. manyleaks 20000 leaks 5000 blocks
// from each of four call chains, of sizes 16 to 76.
func TestMaxLeaks(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "--max-leaks", "3", "-o", "backtrace leak_track", "--log", logPath, "--", prog("manyleaks"), "20000")
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	golden(t, "max_leaks.txt", normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("manyleaks")))
	if want := "mdtrace: 920004 bytes in 20000 leaked allocations\n"; !strings.HasSuffix(r.stderr, want) {
		t.Errorf("stderr does not end with %q:\n%s", want, r.stderr)
	}
}
