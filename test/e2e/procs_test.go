//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leakCounts returns, for each process in a log, the "+++ PROG leaked
// block" lines: PROG and the total of the "(leak N of TOTAL)" numbering,
// which must count the lines.
func leakCounts(t *testing.T, log string) map[int][]string {
	t.Helper()
	re := regexp.MustCompile(`^\d\d-\d\d [\d:.]+ +(\d+) +\d+ E malloc_debug: \+\+\+ (\S+) leaked block of size \d+ at 0x[0-9a-f]+ \(leak (\d+) of (\d+)\)$`)
	out := map[int][]string{}
	for _, line := range strings.Split(log, "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		out[pid] = append(out[pid], m[2]+" of "+m[4])
	}
	return out
}

// TestChildrenOfShell: each program a shell runs gets its own report,
// under its own PID, and the shell its own.
func TestChildrenOfShell(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	leaky := prog("leaky")
	r := runMdtrace(t, "-o", "leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", "sh", "-c", leaky+"; "+leaky)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	sh, _ := strconv.Atoi(strings.TrimSpace(readFile(t, dir+"/ready")))
	if n := strings.Count(r.stderr, fmt.Sprintf(", forked from %d\n", sh)); n != 2 {
		t.Errorf("%d children followed, want 2:\n%s", n, r.stderr)
	}
	counts := leakCounts(t, readFile(t, dir+"/log"))
	var children []int
	for pid, leaks := range counts {
		if pid == sh {
			continue
		}
		children = append(children, pid)
		want := slices.Repeat([]string{leaky + " of 13"}, 13)
		if !slices.Equal(leaks, want) {
			t.Errorf("process %d: %q, want 13 leaks of leaky", pid, leaks)
		}
	}
	if len(children) != 2 {
		t.Errorf("reports of %d children, want 2: %v", len(children), counts)
	}
}

// TestChildExitReports: a child's reports are written once it is gone (a
// single-threaded one is let go at its exit stop, its last batch drained
// into the table as it ends) or, with other threads still ending, while it
// is held: the figures are exact either way. "_exit" ends from a second
// thread, whose blocks are in its batch; "churn" frees thousands of blocks
// through its batches; the shell runs each child and waits for it.
func TestChildExitReports(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		args   string
		want   string
		sizes  map[int]int
		frames map[string]int
	}{
		{"keep 3000", "mdtrace: 448500 bytes in 3000 leaked allocations", map[int]int{100: 30, 199: 30}, map[string]int{"(early_keep+": 3000}},
		{"churn 20000", "mdtrace: 2000 bytes in 10 leaked allocations", map[int]int{200: 10, 48: 0}, map[string]int{"(early_keep+": 10}},
		{"_exit 200", "mdtrace: 66000 bytes in 202 leaked allocations (1 suppressed, 288 bytes)", map[int]int{300: 200, 3000: 2},
			map[string]int{"(early_thread+": 200, "(early_main+": 2}},
	} {
		t.Run(strings.Fields(tc.args)[0], func(t *testing.T) {
			dir := t.TempDir()
			// "; true": the shell forks the program rather than
			// executing it in its own place.
			args := append([]string{"-o", "backtrace leak_track", "--log", dir + "/log", "--ready-file", dir + "/ready", "--",
				"sh", "-c", `"$0" "$@"; true`, prog("early")}, strings.Fields(tc.args)...)
			r := runMdtrace(t, args...)
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			sh, _ := strconv.Atoi(strings.TrimSpace(readFile(t, dir+"/ready")))
			m := regexp.MustCompile(`mdtrace: tracing process (\d+), forked from ` + strconv.Itoa(sh) + `\n`).FindStringSubmatch(r.stderr)
			if m == nil {
				t.Fatalf("no child followed; stderr:\n%s", r.stderr)
			}
			child, _ := strconv.Atoi(m[1])
			log := readFile(t, dir+"/log")
			var mine []string
			for _, line := range strings.Split(log, "\n") {
				if m := logRe.FindStringSubmatch(line); m != nil && m[1] == strconv.Itoa(child) {
					mine = append(mine, m[4])
				}
			}
			var summary []string
			for _, msg := range mine {
				if strings.HasPrefix(msg, "mdtrace: ") {
					summary = append(summary, msg)
				}
			}
			if len(summary) != 1 || summary[0] != tc.want {
				t.Errorf("process %d's bottom lines %q, want %q", child, summary, tc.want)
			}
			checkLeaks(t, strings.Join(mine, "\n"), tc.sizes, tc.frames)
		})
	}
}

// TestManyProcesses: a session that follows more processes than any of
// the probes' per-process maps would hold at once, one after the other as a
// build runs them, traces every one: each is let go at its end.
func TestManyProcesses(t *testing.T) {
	needRoot(t)
	const n = 1100
	dir := t.TempDir()
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			// Deep enough for every stack of sh and its children, the shim's start
			// in each of them among them: no line about cut backtraces.
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace=64 leak_track", "--log", dir+"/log."+mode.name, "--",
				"sh", "-c", `i=0; while [ $i -lt "$0" ]; do /bin/true; i=$((i + 1)); done`, strconv.Itoa(n))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			var other []string
			followed := 0
			bottom := regexp.MustCompile(`^mdtrace: [0-9]+ bytes in [0-9]+ leaked allocations( \([0-9]+ suppressed, [0-9]+ bytes\))? in 1101 processes$`)
			for _, line := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
				switch {
				case strings.Contains(line, ", forked from "):
					followed++
				case strings.HasPrefix(line, "mdtrace: tracing process "), bottom.MatchString(line):
				default:
					other = append(other, line)
				}
			}
			if followed != n || len(other) > 0 {
				t.Errorf("%d children followed, want %d; other lines: %q", followed, n, other)
			}
		})
	}
}

// dumpRecords returns the "z Z  sz SIZE  num N" part of a heap dump's
// records.
func dumpRecords(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(readFile(t, path), "\n") {
		if strings.HasPrefix(line, "z ") {
			z, _, _ := strings.Cut(line, "  bt")
			out = append(out, strings.Join(strings.Fields(z), " "))
		}
	}
	return out
}

// TestZygoteChild: a child forked without exec starts with its parent's
// table; what it allocates after the fork is a zygote child's (z 1). The
// 4096 bytes are stdout's buffer, allocated by each process's first printf
// after the fork. With "free", the child frees the block it started with,
// from the copy mdtrace made of its parent's table: the probes find the
// block where mdtrace put it, and the parent's stays its own.
func TestZygoteChild(t *testing.T) {
	needRoot(t)
	cases := []struct {
		args  []string
		child []string
	}{
		{nil, []string{"z 0 sz 1111 num 1", "z 1 sz 4096 num 1", "z 1 sz 2222 num 1"}},
		{[]string{"free"}, []string{"z 1 sz 4096 num 1", "z 1 sz 2222 num 1"}},
	}
	for _, c := range cases {
		for _, mode := range launchModes {
			t.Run(strings.Join(append([]string{mode.name}, c.args...), "/"), func(t *testing.T) {
				dir := t.TempDir()
				// The stdio buffer counts among the leaks.
				r := runMdtrace(t, append([]string{modeFlag(mode.flag), "--no-default-suppressions", "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix=" + dir + "/h",
					"--log", dir + "/log", "--", prog("forker")}, c.args...)...)
				if r.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
				}
				var parent, child int
				if _, err := fmt.Sscanf(r.stdout, "child %d\nparent %d\n", &child, &parent); err != nil {
					t.Fatalf("output %q: %v", r.stdout, err)
				}
				if want := []string{"z 0 sz 4096 num 1", "z 0 sz 1111 num 1"}; !slices.Equal(dumpRecords(t, fmt.Sprintf("%s/h.%d.exit.txt", dir, parent)), want) {
					t.Errorf("parent's dump: %q, want %q", dumpRecords(t, fmt.Sprintf("%s/h.%d.exit.txt", dir, parent)), want)
				}
				if got := dumpRecords(t, fmt.Sprintf("%s/h.%d.exit.txt", dir, child)); !slices.Equal(got, c.child) {
					t.Errorf("child's dump: %q, want %q", got, c.child)
				}
				log := readFile(t, dir+"/log")
				counts := leakCounts(t, log)
				if len(counts[parent]) != 2 || len(counts[child]) != len(c.child) || strings.Contains(log, "UNKNOWN") {
					t.Errorf("leaks per process: %v; log:\n%s", counts, log)
				}
			})
		}
	}
}

// TestFollowForksAttach: with --follow-forks, the children an attached
// process forks are traced too; without it, they are not.
func TestFollowForksAttach(t *testing.T) {
	needRoot(t)
	for _, follow := range []bool{true, false} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			dir := t.TempDir()
			target := start(t, prog("forker"), "wait")
			target.expectLine(t, "ready")
			args := []string{"-p", fmt.Sprint(target.cmd.Process.Pid), "-o", "leak_track", "--log", dir + "/log", "--ready-file", dir + "/ready"}
			if follow {
				args = append(args, "--follow-forks")
			}
			m := start(t, mdtraceBin, args...)
			waitFile(t, dir+"/ready")
			io.WriteString(target.stdin, "go\n")
			line, _ := target.stdout.ReadString('\n')
			var child int
			if _, err := fmt.Sscanf(line, "child %d\n", &child); err != nil {
				t.Fatalf("read %q: %v", line, err)
			}
			target.expectLine(t, fmt.Sprintf("parent %d", target.cmd.Process.Pid))
			target.wait(t)
			if code := m.wait(t); code != 0 {
				t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			// Following forks holds the process with ptrace, and says so.
			hold := fmt.Sprintf("mdtrace: holding process %d with ptrace for --follow-forks (its children are followed from their fork): debuggers and profilers cannot attach to it while mdtrace runs\n", target.cmd.Process.Pid)
			if strings.Contains(m.stderr.String(), hold) != follow || (!follow && strings.Contains(m.stderr.String(), "holding")) {
				t.Errorf("mdtrace stderr:\n%s\nwant the line %q: %v", m.stderr.String(), hold, follow)
			}
			// stdout's buffer came before the attach: the parent
			// leaks 1111 bytes, the child those and 2222.
			counts := leakCounts(t, readFile(t, filepath.Join(dir, "log")))
			if len(counts[target.cmd.Process.Pid]) != 1 {
				t.Errorf("the attached process's leaks: %v", counts)
			}
			if want := map[bool]int{true: 2, false: 0}[follow]; len(counts[child]) != want {
				t.Errorf("the child's leaks: %d, want %d; %v", len(counts[child]), want, counts)
			}
		})
	}
}

// TestFollowForksAttachVfork: a process attached with -p --follow-forks
// whose vfork child allocates in its memory before it executes /bin/true, as
// dash does, built as distributions build code (vforker_o2). The child walks
// through its parent's unwind list: the leak's backtrace goes from the
// child's function to main, and no walk is left to frame pointers alone. The
// child, followed, ends with one line: it has no block left.
func TestFollowForksAttachVfork(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := start(t, prog("vforker_o2"), "wait")
	target.expectLine(t, "ready")
	m := attachGo(t, target, dir, "--follow-forks", "--backtrace")
	pid := target.cmd.Process.Pid
	var child, parent int
	for _, line := range strings.Split(m.stderr.String(), "\n") {
		if k, _ := fmt.Sscanf(line, "mdtrace: tracing process %d, forked from %d", &child, &parent); k == 2 {
			break
		}
	}
	self := prog("vforker_o2")
	got := pcRe.ReplaceAllString(m.stderr.String(), "pc PC")
	got = regexp.MustCompile(`\+[0-9]+\)`).ReplaceAllString(got, "+OFF)")
	want := fmt.Sprintf("mdtrace: holding process %d with ptrace for --follow-forks (its children are followed from their fork): debuggers and profilers cannot attach to it while mdtrace runs\n", pid) +
		fmt.Sprintf("mdtrace: tracing process %d (%s): malloc free calloc realloc reallocarray posix_memalign memalign aligned_alloc valloc pvalloc in /usr/lib/x86_64-linux-gnu/libc.so.6\n", pid, self) +
		fmt.Sprintf("mdtrace: tracing process %d, forked from %d\n", child, pid) +
		fmt.Sprintf("mdtrace: process %d (true): 0 bytes in 0 allocations live since tracing began\n", child) +
		fmt.Sprintf("mdtrace: process %d (%s): blocks live since tracing began, the 1 backtraces with the most bytes of 1:\n", pid, self) +
		"3333 bytes in 1 allocations:\n" +
		fmt.Sprintf("          #00  pc PC  %s (in_vfork_child+OFF)\n", self) +
		fmt.Sprintf("          #01  pc PC  %s (main+OFF)\n", self) +
		"          #02  pc PC  /usr/lib/x86_64-linux-gnu/libc.so.6 (__libc_start_call_main+OFF)\n" +
		"          #03  pc PC  /usr/lib/x86_64-linux-gnu/libc.so.6 (__libc_start_main+OFF)\n" +
		fmt.Sprintf("          #04  pc PC  %s (_start+OFF)\n", self) +
		fmt.Sprintf("mdtrace: process %d (%s): 3333 bytes in 1 allocations live since tracing began\n", pid, self) +
		fmt.Sprintf("mdtrace: process %d (%s) exited with status 0\n", pid, self)
	if got != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
	}
}

// TestShimLeakInfo: get_malloc_leak_info in a shimmed process answers from
// mdtrace's table, in Android's format, sorted by size with equal stacks
// merged.
func TestShimLeakInfo(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		opts, stdout, log string
	}{
		{"backtrace", "overall_size=432 info_size=144 total_memory=9500 backtrace_size=16 entries=3\n" +
			"size=9000 num=1 first_frame=alloc_large\nsize=200 num=1 first_frame=alloc_medium\nsize=100 num=3 first_frame=alloc_small\nnull_check=ok\n",
			"get_malloc_leak_info: At least one invalid parameter.\n"},
		{"backtrace=4", "overall_size=144 info_size=48 total_memory=9500 backtrace_size=4 entries=3\n" +
			"size=9000 num=1 first_frame=alloc_large\nsize=200 num=1 first_frame=alloc_medium\nsize=100 num=3 first_frame=alloc_small\nnull_check=ok\n",
			"get_malloc_leak_info: At least one invalid parameter.\n" +
				"mdtrace: 5 backtraces were cut at 4 frames with frames left (backtrace=4, up to 256, for more; marked [truncated] in --folded)\n"},
		{"leak_track", "overall_size=0 info_size=0 total_memory=0 backtrace_size=0 entries=0\nnull_check=ok\n",
			"get_malloc_leak_info: Allocations not being tracked, to enable set the option 'backtrace'.\n" +
				"get_malloc_leak_info: At least one invalid parameter.\n" +
				"mdtrace: 9500 bytes in 5 leaked allocations\n"},
	} {
		t.Run(tc.opts, func(t *testing.T) {
			dir := t.TempDir()
			r := runMdtrace(t, "-o", tc.opts, "--log", dir+"/log", "--", prog("leakinfo"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			if r.stdout != tc.stdout {
				t.Errorf("output:\n%s\nwant:\n%s", r.stdout, tc.stdout)
			}
			var got strings.Builder
			for _, m := range logMessages(t, readFile(t, dir+"/log"), "") {
				if !strings.Contains(m, "leaked block") && !strings.HasPrefix(m, "Backtrace") && !strings.HasPrefix(m, "   ") {
					fmt.Fprintln(&got, m)
				}
			}
			if got.String() != tc.log {
				t.Errorf("log:\n%s\nwant:\n%s", got.String(), tc.log)
			}
		})
	}
}

// TestShimSignal47: kill -47 to a shimmed process (here, the process
// raising it) makes mdtrace write its heap dump at once, while it runs.
func TestShimSignal47(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	r := runMdtrace(t, "-o", "backtrace backtrace_dump_prefix="+dir+"/h", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("leakinfo"), "47")
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.HasSuffix(r.stdout, "null_check=ok\nraised 47\n") {
		t.Errorf("output:\n%s", r.stdout)
	}
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	path := fmt.Sprintf("%s/h.%s.txt", dir, pid)
	want := []string{"z 0 sz 9000 num 1", "z 0 sz 200 num 1", "z 0 sz 100 num 3"}
	if got := dumpRecords(t, path); !slices.Equal(got, want) {
		t.Errorf("dump records %q, want %q", got, want)
	}
	if log := readFile(t, dir+"/log"); !strings.Contains(log, " E malloc_debug: Dumping to file: "+path+"\n") {
		t.Errorf("log:\n%s", log)
	}
}

// TestShimChecksUnderMdtrace: with guard, fill, free_track and
// expand_alloc, a write into a freed block is reported by the shim at
// exit, with the backtrace of the free, in mdtrace's log; mdtrace's leak
// report gives the size the program asked for.
func TestShimChecksUnderMdtrace(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	r := runMdtrace(t, "-o", "backtrace leak_track guard fill free_track expand_alloc", "--log", dir+"/log", "--", prog("verify"), "write")
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	got := normalizeLeakReport(t, logMessages(t, readFile(t, dir+"/log"), ""), prog("verify"))
	golden(t, "shim_checks.txt", regexp.MustCompile(`ALLOCATION 0x[0-9a-f]+`).ReplaceAllString(got, "ALLOCATION 0xPTR"))
}

// TestShimStressUnderMdtrace: 4 threads of 2,500 malloc/free pairs each,
// under every check the shim has and mdtrace's tracking: no error, no
// loss, and no leak of the program's own (glibc keeps each finished
// thread's TLS vector, which is all that is left).
func TestShimStressUnderMdtrace(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	r := runMdtrace(t, "-o", "backtrace leak_track guard fill free_track verify_pointers", "--log", dir+"/log", "--", prog("record"), "stress", "2500")
	if r.code != 0 || r.stdout != "stress: done\n" {
		t.Fatalf("exit status %d, output %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "lost") || strings.Contains(r.stderr, "missed") {
		t.Errorf("losses:\n%s", r.stderr)
	}
	log := readFile(t, dir+"/log")
	if strings.Contains(log, "ALLOCATION") {
		t.Errorf("errors:\n%s", log)
	}
	// A block of the runtime's may have the program's frames below its
	// first (a stdio buffer made by a printf in main): only a first frame
	// in the program makes a block the program's.
	for _, m := range logMessages(t, log, "") {
		if strings.HasPrefix(m, "          #00 ") && strings.Contains(m, prog("record")+" (") {
			t.Errorf("a leak of the program's own: %s\n%s", m, log)
		}
	}
}

// TestAll: --all audits every process using the system's libc; the test's
// own process is listed among the others with exactly what it allocated
// after mdtrace started: leaky's 13 blocks, sampling off (--sample-bytes 0).
func TestAll(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--all", "--sample-bytes", "0", "--format", "json", "--interval", "300ms", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	target := start(t, prog("leaky"), "hold")
	target.expectLine(t, "leaky: done")
	// The summary printed at the interrupt, while leaky holds its blocks;
	// earlier ones may catch it starting up.
	out := m.interrupt(t)
	a, _ := lastSummary(t, out)
	i := slices.IndexFunc(a.Ranking, func(r auditRow) bool { return r.PID == target.cmd.Process.Pid })
	if i < 0 {
		t.Fatalf("the test's process was never listed:\n%s", out)
	}
	if r := a.Ranking[i]; r.AddedBlocks != 13 || r.AddedBytes != 16194 || r.Exe != prog("leaky") || r.Comm != "leaky" || r.Exited {
		t.Errorf("row %+v, want 13 blocks, 16194 bytes, %s, leaky, not exited", r, prog("leaky"))
	}
	target.stdin.Close()
	target.wait(t)
}

// TestIntervalDumps: --interval writes a heap dump of the traced process
// periodically, each to a file of its own named by its time
// (PREFIX.PID.YYYYMMDDTHHMMSS.mmm.txt).
func TestIntervalDumps(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--interval", "200ms", "-o", "backtrace backtrace_dump_prefix="+dir+"/h", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("leaky"), "hold")
	m.expectLine(t, "leaky: done")
	waitFile(t, dir+"/ready")
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	dumps := func() []string {
		m, _ := filepath.Glob(fmt.Sprintf("%s/h.%s.2*.txt", dir, pid))
		return m
	}
	for i := 0; i < 100 && len(dumps()) < 2; i++ {
		sleepBriefly()
	}
	m.stdin.Close()
	if code := m.wait(t); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	name := regexp.MustCompile(`/h\.[0-9]+\.20[0-9]{6}T[0-9]{6}\.[0-9]{3}\.txt$`)
	all := dumps()
	if len(all) < 2 {
		t.Fatalf("%d dumps, want at least 2: %v", len(all), all)
	}
	for _, path := range all {
		if !name.MatchString(path) || !strings.Contains(readFile(t, dir+"/log"), "Dumping to file: "+path) {
			t.Errorf("dump %s: not named by its time, or not in the log", path)
		}
		checkHeapDump(t, readFile(t, path), prog("leaky"))
	}
}

// TestAttachedExecProbesOnce: an attached shell that executes a program
// using the same libc, reached by another path (/lib, /usr/lib), keeps one
// set of probes: a bad pointer is reported once.
func TestAttachedExecProbesOnce(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := start(t, "sh", "-c", "echo ready; read x; exec "+prog("verify")+" usable")
	target.expectLine(t, "ready")
	m := start(t, mdtraceBin, "-p", fmt.Sprint(target.cmd.Process.Pid), "-o", "verify_pointers", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.wait(t)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := readFile(t, dir+"/log")
	if n := strings.Count(log, "UNKNOWN POINTER (malloc_usable_size)"); n != 1 {
		t.Errorf("%d reports, want 1:\n%s", n, log)
	}
}

// TestSpawnedChildren: children started as build tools start them, with
// posix_spawn (a vfork), are traced from their exec, with their frames
// named; a vfork child that exits without running a program is followed
// to its exit and reports nothing.
func TestSpawnedChildren(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			leaky := prog("leaky")
			// stdout's buffer counts among spawner's leaks.
			r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "backtrace leak_track", "--log", dir+"/log", "--", prog("spawner"), leaky)
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			var spawned, vforked int
			if _, err := fmt.Sscanf(r.stdout, "spawned %d\nleaky: done\nvforked %d\n", &spawned, &vforked); err != nil {
				t.Fatalf("output %q: %v", r.stdout, err)
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			for _, line := range lines[:len(lines)-1] {
				if !strings.HasPrefix(line, "mdtrace: tracing process ") {
					t.Errorf("stderr: %q", line)
				}
			}
			if want := "mdtrace: 23623 bytes in 15 leaked allocations in 3 processes"; lines[len(lines)-1] != want {
				t.Errorf("stderr's last line %q, want %q", lines[len(lines)-1], want)
			}
			log := readFile(t, dir+"/log")
			counts := leakCounts(t, log)
			if want := slices.Repeat([]string{leaky + " of 13"}, 13); !slices.Equal(counts[spawned], want) {
				t.Errorf("spawned leaky %d: %q, want its 13 leaks", spawned, counts[spawned])
			}
			if len(counts[vforked]) != 0 {
				t.Errorf("the vfork child %d reported %q", vforked, counts[vforked])
			}
			// spawner's own: its block and stdout's buffer.
			spawner := prog("spawner")
			if n := strings.Count(log, "+++ "+spawner+" leaked block of size "); n != 2 || !strings.Contains(log, "+++ "+spawner+" leaked block of size 3333 at ") {
				t.Errorf("%d leaks of spawner, want 2, one of 3333 bytes", n)
			}
			if len(counts) != 2 {
				t.Errorf("reports of %d processes, want spawner's and leaky's: %v", len(counts), counts)
			}
			// Frames of the spawned program are named: its leak_malloc
			// and main, under its own PID.
			for _, fn := range []string{"(leak_malloc+", "(main+"} {
				re := regexp.MustCompile(fmt.Sprintf(` %d +%d E malloc_debug: +#\d\d +pc [0-9a-f]+ +%s %s`, spawned, spawned, regexp.QuoteMeta(leaky), regexp.QuoteMeta(fn)))
				if !re.MatchString(log) {
					t.Errorf("no frame %s...) of %s in process %d's report", fn, leaky, spawned)
				}
			}
		})
	}
}

// auditJSON is one summary of `mdtrace --all --format json`.
type auditJSON struct {
	Processes  int        `json:"processes"`
	AddedBytes int64      `json:"added_bytes"`
	Ranking    []auditRow `json:"ranking"`
}

// lastSummary returns the last summary of out, JSON a line (--format
// json), and that line, for messages.
func lastSummary(t *testing.T, out []byte) (auditJSON, string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	var a auditJSON
	if err := json.Unmarshal([]byte(last), &a); err != nil {
		t.Fatalf("the last summary is not JSON: %v\n%s", err, out)
	}
	return a, last
}

type auditRow struct {
	PID         int         `json:"pid"`
	Comm        string      `json:"comm"`
	Exe         string      `json:"exe"`
	AddedBlocks int64       `json:"added_blocks"`
	AddedBytes  int64       `json:"added_bytes"`
	Exited      bool        `json:"exited"`
	New         bool        `json:"new"`
	AnonRSS     int64       `json:"anon_rss_bytes"`
	Sites       []auditSite `json:"sites"`
}

type auditSite struct {
	Blocks int64 `json:"blocks"`
	Bytes  int64 `json:"bytes"`
	Frames []struct {
		File     string `json:"file"`
		Function string `json:"function"`
	} `json:"frames"`
}

// functions returns the names of the site's frames, innermost first.
func (s auditSite) functions() []string {
	var out []string
	for _, f := range s.Frames {
		out = append(out, f.Function)
	}
	return out
}

// TestAllAudit: `--all --backtrace --format json` ranks the processes by the
// live bytes they added during the audit, with their top sites: one started
// after the audit began, one in its own mount namespace, one that ends
// during the audit (its figures at its end stay), and one linked with
// jemalloc, whose allocator the audit finds and probes; --duration ends it.
// checkAuditDumps checks that each of the files names in dir is the heap
// dump of testdata/leaky's 13 blocks of 16194 bytes, with its maps. A
// process that ended before the audit's scan saw it has no maps known:
// its dump says so, as Android's does.
func checkAuditDumps(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		d := readFile(t, filepath.Join(dir, name))
		maps := strings.Contains(d, "/leaky\n") || strings.HasSuffix(name, ".exit.txt") && strings.Contains(d, "MAPS\nCould not open /proc/self/maps\nEND\n")
		if !strings.HasPrefix(d, "Android Native Heap Dump v1.2\n") || !strings.Contains(d, "\nTotal memory: 16194\nAllocation records: 13\nBacktrace size: 16\n") || !maps {
			t.Errorf("%s is not the heap dump of leaky's 16194 bytes with its maps:\n%s", name, d)
		}
	}
}

// TestAllEndedRunsFolded: the text summary folds the runs of a program
// that ended into one row, at the place of its largest, with the count of
// runs and their figures added up; a run still going has its own row. They
// end before the audit's scan sees them: each is named by its exec (a fork
// child by its parent's), as the probes noted it.
func TestAllEndedRunsFolded(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--all", "--sample-bytes", "0", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	held := start(t, prog("leaky"), "hold")
	held.expectLine(t, "leaky: done")
	for range 3 {
		start(t, prog("leaky")).wait(t)
	}
	// A fork child, named as its parent's program.
	start(t, prog("forker")).wait(t)
	// A scan keeps the figures of the processes that ended.
	time.Sleep(1200 * time.Millisecond)
	out := string(m.interrupt(t))
	held.stdin.Close()
	held.wait(t)
	last := out[strings.LastIndex(out, "mdtrace: live heap allocated"):]
	folded := regexp.MustCompile(`(?m)^ +[0-9]+ +13 +16194 +- +` + regexp.QuoteMeta(prog("leaky")) +
		` (\[new\] )?\[exited\], the largest of 3 runs of it that ended: 39 blocks, 48582 bytes in all$`)
	running := regexp.MustCompile(fmt.Sprintf(`(?m)^ +%d +13 +16194 +[0-9]+ +%s \[new\]$`, held.cmd.Process.Pid, regexp.QuoteMeta(prog("leaky"))))
	forked := regexp.MustCompile(`(?m)^ +[0-9]+ +[0-9]+ +[0-9]+ +- +` + regexp.QuoteMeta(prog("forker")) +
		` (\[new\] )?\[exited\], the largest of 2 runs of it that ended: [0-9]+ blocks, [0-9]+ bytes in all$`)
	if !folded.MatchString(last) || !running.MatchString(last) || !forked.MatchString(last) {
		t.Errorf("the last summary lacks the row of leaky's three ended runs, that of the one running, or that of forker and its child:\n%s", last)
	}
}

func TestAllAudit(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("unshare (util-linux) is not installed: %v", err)
	}
	haveJemalloc := true
	if _, err := os.Stat(jemalloc); err != nil {
		haveJemalloc = false
	}
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--all", "--sample-bytes", "0", "--backtrace", "-o", "backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/heap",
		"--format", "json", "--duration", "8s", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	held := start(t, prog("leaky"), "hold")
	held.expectLine(t, "leaky: done")
	inNS := start(t, "unshare", "-m", "--propagation", "private", prog("leaky"), "hold")
	inNS.expectLine(t, "leaky: done")
	ended := start(t, prog("leaky"))
	ended.wait(t)
	// Built without frame pointers, it allocates and ends before a scan
	// sees it (20000 pairs, then its leak): mdtrace makes its list of
	// mappings when it hears of its first walk, which it finishes, and
	// its leak's walk goes through its tables.
	short := start(t, prog("chain_gcc_o2"), "20000")
	short.wait(t)
	// Signal 47: a heap dump of each process that added blocks, of the
	// blocks it added.
	m.cmd.Process.Signal(syscall.Signal(47))
	for i := 0; !strings.Contains(m.stderr.String(), "heap dumps of "); i++ {
		if i == 100 {
			t.Fatalf("no heap dumps written:\n%s", m.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkAuditDumps(t, dir, fmt.Sprintf("heap.%d.txt", held.cmd.Process.Pid), fmt.Sprintf("heap.%d.txt", inNS.cmd.Process.Pid))
	var je *background
	if haveJemalloc {
		je = start(t, prog("otheralloc_jemalloc"))
		je.expectLine(t, "ready")
		notice := fmt.Sprintf("mdtrace: also auditing every process that uses the allocator of process %d (%s), %s,", je.cmd.Process.Pid, prog("otheralloc_jemalloc"), jemalloc)
		for i := 0; !strings.Contains(m.stderr.String(), notice); i++ {
			if i == 100 {
				t.Fatalf("stderr lacks %q:\n%s", notice, m.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		io.WriteString(je.stdin, "go\n")
		je.expectLine(t, "done")
	}
	out, _ := io.ReadAll(m.stdout)
	if code := m.wait(t); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	// And one of each process that ended, at its end, found by the
	// audit's end at the latest.
	checkAuditDumps(t, dir, fmt.Sprintf("heap.%d.exit.txt", ended.cmd.Process.Pid))
	a, last := lastSummary(t, out)
	type want struct {
		pid           int
		blocks, bytes int64
		exited, new   bool
		leaf          string
	}
	// The processes started during the audit on the system's libc are
	// new: their whole heap is known. Not claimed of the one that ended
	// before the audit's scan saw it: its allocator is not known.
	wants := []want{
		{held.cmd.Process.Pid, 13, 16194, false, true, ""},
		{inNS.cmd.Process.Pid, 13, 16194, false, true, ""},
		{ended.cmd.Process.Pid, 13, 16194, true, false, ""},
		{short.cmd.Process.Pid, 2, 8417, true, true, "chain_12"},
	}
	if haveJemalloc {
		// Three leaks, the blocks from before the probes freed; it
		// allocated them after its allocator was probed, and with its
		// unwind tables loaded: the largest site reaches main. Its
		// allocator was probed only once it ran: not new.
		wants = append(wants, want{je.cmd.Process.Pid, 3, 6006, false, false, "other_leak_realloc"})
	}
	for _, w := range wants {
		i := slices.IndexFunc(a.Ranking, func(r auditRow) bool { return r.PID == w.pid })
		if i < 0 {
			t.Errorf("process %d is not in the ranking:\n%s", w.pid, last)
			continue
		}
		r := a.Ranking[i]
		// A process that ended is new if mdtrace heard of it by its
		// first walk (under load, the walks' budget may be spent).
		if r.AddedBlocks != w.blocks || r.AddedBytes != w.bytes || r.Exited != w.exited || (r.New != w.new && !w.exited) || len(r.Sites) == 0 {
			t.Errorf("process %d: %d blocks, %d bytes, exited %v, new %v, %d sites; want %d, %d, %v, %v, some", w.pid, r.AddedBlocks, r.AddedBytes, r.Exited, r.New, len(r.Sites), w.blocks, w.bytes, w.exited, w.new)
			continue
		}
		if (r.AnonRSS > 0) == w.exited {
			t.Errorf("process %d: anonymous RSS %d bytes, exited %v", w.pid, r.AnonRSS, w.exited)
		}
		if w.leaf == "" {
			continue
		}
		if w.pid == short.cmd.Process.Pid && r.Exe == "" && strings.Contains(string(out), "were walked by frame pointers alone, past the bounds") {
			// Never heard of: a machine busy with other new
			// processes spent the walks' budget, which is said.
			t.Logf("process %d: not heard of by its first walks (their budget was spent)", w.pid)
			continue
		}
		chain := r.Sites[0].functions()
		if len(chain) == 0 || chain[0] != w.leaf || !slices.Contains(chain, "main") {
			t.Errorf("process %d: the largest site's functions %v, want %s first and main", w.pid, chain, w.leaf)
		}
	}
	held.stdin.Close()
	inNS.stdin.Close()
	held.wait(t)
	inNS.wait(t)
	if je != nil {
		je.stdin.Close()
		je.wait(t)
	}
}

// TestAllAuditLibraryLoaded: under --all no loader is watched, so the list
// of mappings mdtrace makes of a process, when it first sees it, lacks the
// libraries it loads later. A walk that stops in one is left to mdtrace,
// which makes the list again from the process's maps and finishes it:
// dlnofp, seen by a scan of the audit before it dlopens libdlnofp.so (both
// built without frame pointers), has its two leaks' sites whole, from the
// library's dlnofp_leaf to main, and no walk stopped.
func TestAllAuditLibraryLoaded(t *testing.T) {
	needRoot(t)
	prog("libdlnofp.so")
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--all", "--sample-bytes", "0", "--backtrace=32", "--format", "json", "--duration", "4s", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	target := start(t, prog("dlnofp"), "wait")
	// Two scans of the audit (one a second) see it and make its list.
	time.Sleep(2200 * time.Millisecond)
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "dlnofp: done")
	out, _ := io.ReadAll(m.stdout)
	if code := m.wait(t); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	target.stdin.Close()
	target.wait(t)
	a, last := lastSummary(t, out)
	i := slices.IndexFunc(a.Ranking, func(r auditRow) bool { return r.PID == target.cmd.Process.Pid })
	if i < 0 {
		t.Fatalf("dlnofp (%d) is not in the ranking:\n%s", target.cmd.Process.Pid, last)
	}
	whole := 0
	for _, s := range a.Ranking[i].Sites {
		fns := s.functions()
		if (s.Bytes == 3001 || s.Bytes == 3002) && len(fns) > 4 && fns[0] == "dlnofp_leaf" && slices.Contains(fns, "main") {
			whole++
		}
	}
	if whole != 2 {
		t.Errorf("%d of dlnofp's two leaks have a site from dlnofp_leaf to main:\n%s", whole, last)
	}
	if strings.Contains(m.stderr.String(), "backtraces end before") {
		t.Errorf("walks stopped short:\n%s", m.stderr.String())
	}
}
