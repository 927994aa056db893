//go:build linux

package e2e

import (
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unreachWant is what testdata/unreach.c leaves unreachable: a cycle (two
// of 1006), a chain held by a lost block (1007, 1008, 1009), a block held
// only from a lost block glibc maps by itself (1048577, 1011) and a lost
// block (1012); everything else is reachable from a global, TLS, the
// stacks of threads blocked in a read, a register only, an interior
// pointer or a mapped block a global holds.
const (
	unreachSummary = "1055636 bytes in 8 allocations unreachable out of "
)

// TestUnreachable: signal 48 sent to mdtrace checks the running program
// (four threads blocked in system calls) as libmemunreachable does, and
// --unreachable-only reports at exit only the leaks nothing points to,
// for the program built -O0 and -O2 without frame pointers, in every
// launch mode.
func TestUnreachable(t *testing.T) {
	needRoot(t)
	for _, build := range []string{"unreach_o0", "unreach_o2"} {
		for _, mode := range launchModes {
			t.Run(build+"/"+mode.name, func(t *testing.T) {
				logPath := filepath.Join(t.TempDir(), "log")
				b := start(t, mdtraceBin, modeFlag(mode.flag), "-o", "backtrace leak_track check_unreachable_on_signal",
					"--unreachable-only", "--log", logPath, "--", prog(build))
				b.expectLine(t, "ready")
				b.cmd.Process.Signal(syscall.Signal(48))
				deadline := time.Now().Add(20 * time.Second)
				for !strings.Contains(readFile(t, logPath), "unreachable out of") {
					if time.Now().After(deadline) {
						t.Fatalf("no check logged:\n%s", readFile(t, logPath))
					}
					time.Sleep(20 * time.Millisecond)
				}
				b.stdin.Write([]byte("go\n"))
				if code := b.wait(t); code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", code, b.stderr.String())
				}
				log := readFile(t, logPath)
				for _, want := range []string{
					" I malloc_debug: Starting to check for unreachable memory.\n",
					" I libmemunreachable: unreachable memory detection done\n",
					" E libmemunreachable: " + unreachSummary,
					" E libmemunreachable:   1048577 bytes unreachable at ",
					"   referencing 1011 unreachable bytes in 1 allocation\n",
					" E libmemunreachable:   1007 bytes unreachable at ",
					"   referencing 2017 unreachable bytes in 2 allocations\n",
				} {
					if !strings.Contains(log, want) {
						t.Errorf("log lacks %q:\n%s", want, log)
					}
				}
				if n := strings.Count(log, "bytes unreachable at"); n != 5 {
					t.Errorf("%d leaks logged, want 5 (the lost big block, the chain's head, the cycle's two, the lost block)", n)
				}
				for _, size := range []string{"1048577", "1012", "1011", "1009", "1008", "1007", "1006"} {
					if !strings.Contains(log, "leaked block of size "+size+" ") {
						t.Errorf("the leak report lacks the block of %s bytes", size)
					}
				}
				// At the exit stop the other threads are killed, and
				// their registers gone: the block only r12 held is
				// unreachable then, unless a stale copy remains. With
				// the shim, the check at exit is taken at its last
				// destructor, all threads running, and it is
				// reachable.
				n := strings.Count(log, "leaked block of size")
				bottom := "mdtrace: 1055636 bytes in 8 unreachable leaked allocations ("
				if mode.flag != "--no-preload" && !strings.Contains(log, "I malloc_debug: mdtrace: as it exits, process ") {
					t.Errorf("no check as the process began to exit")
				}
				if mode.flag != "--no-preload" && strings.Contains(log, "leaked block of size 1004 ") {
					t.Errorf("the block a register held is reported unreachable at exit")
				}
				if strings.Contains(log, "leaked block of size 1004 ") {
					n--
					bottom = "mdtrace: 1056640 bytes in 9 unreachable leaked allocations ("
				}
				if n != 8 {
					t.Errorf("%d leaks reported at exit, want 8 and the register's", n)
				}
				if !strings.Contains(b.stderr.String(), bottom) {
					t.Errorf("stderr lacks %q:\n%s", bottom, b.stderr.String())
				}
			})
		}
	}
}

// TestUnreachableValgrind: valgrind's leak check (definitely and
// indirectly lost) gives the same verdict on the same program, with
// glibc's malloc and with jemalloc (which valgrind replaces when told its
// name). Only the -O0 build with glibc's: valgrind's verdict on the -O2
// one changes from run to run (the stale copies its threads' teardown
// leaves).
func TestUnreachableValgrind(t *testing.T) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Skip("valgrind is not installed")
	}
	re := regexp.MustCompile(`(definitely|indirectly) lost: ([0-9,]+) bytes in ([0-9,]+) blocks`)
	for _, tc := range []struct {
		build string
		lib   string
		args  []string
	}{
		{"unreach_o0", "", nil},
		{"unreach_jemalloc", jemalloc, []string{"--soname-synonyms=somalloc=" + filepath.Base(jemalloc)}},
	} {
		t.Run(tc.build, func(t *testing.T) {
			if tc.lib != "" {
				needLib(t, tc.lib)
			}
			// Valgrind's own verdict changes from run to run now and
			// then (a block a dead thread's stack still holds, its
			// teardown's stale copies): mdtrace's must be one of those
			// of up to five runs.
			var verdicts []string
			var out []byte
			for range 5 {
				cmd := exec.Command(vg, append(append([]string{"--leak-check=full"}, tc.args...), prog(tc.build))...)
				cmd.Stdin = strings.NewReader("go\n")
				out, _ = cmd.CombinedOutput()
				var bytes, blocks int
				for _, m := range re.FindAllStringSubmatch(string(out), -1) {
					n, k := atoiComma(m[2]), atoiComma(m[3])
					bytes += n
					blocks += k
				}
				if bytes == 1055636 && blocks == 8 {
					return
				}
				verdicts = append(verdicts, fmt.Sprintf("%d bytes in %d blocks", bytes, blocks))
			}
			t.Errorf("valgrind says %s lost in five runs, mdtrace 1055636 bytes in 8 blocks; the last:\n%s", strings.Join(verdicts, ", "), out)
		})
	}
}

func atoiComma(s string) int {
	n := 0
	for _, c := range s {
		if c >= '0' && c <= '9' {
			n = n*10 + int(c-'0')
		}
	}
	return n
}

// lostText is what testdata/unreach.c writes into its lost block of 1012
// bytes.
const lostText = "lost: nothing points here any more"

// lostContents is libmemunreachable's contents lines of the lost block at
// addr (hex, as the report gives it): its first 32 bytes, 16 a line.
func lostContents(t *testing.T, addr string) string {
	t.Helper()
	a, err := strconv.ParseUint(addr, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	s := "   first 32 bytes of contents:\n"
	for i := 0; i < 32; i += 16 {
		s += fmt.Sprintf("   %x: ", a+uint64(i))
		for _, c := range []byte(lostText[i : i+16]) {
			s += fmt.Sprintf("%02x ", c)
		}
		s += lostText[i:i+16] + "\n"
	}
	return s
}

var lostAtRE = regexp.MustCompile(`  1012 bytes unreachable at ([0-9a-f]+)\n`)

// childOf is the pid of the one child of process pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		for _, c := range strings.Fields(readFile(t, f)) {
			n, _ := strconv.Atoi(c)
			return n
		}
	}
	t.Fatalf("process %d has no child", pid)
	return 0
}

// waitLog waits until the log at path holds want, count times.
func waitLog(t *testing.T, path, want string, count int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(readFile(t, path), want) < count {
		if time.Now().After(deadline) {
			t.Fatalf("the log never held %q %d times:\n%s", want, count, readFile(t, path))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUnreachableAttach: for a process attached to with -p before it
// allocates, the check runs at any time from the command line (mdtrace
// unreachable -p PID, with and without --contents) and on signal 48 sent
// to mdtrace, with the same verdict as valgrind's; at exit,
// --unreachable-first lists the unreachable blocks, then the reachable
// ones, and the bottom line counts both.
func TestUnreachableAttach(t *testing.T) {
	needRoot(t)
	for _, build := range []string{"unreach_o0", "unreach_o2"} {
		t.Run(build, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "log")
			target := start(t, prog(build), "late")
			target.expectLine(t, "started")
			pid := fmt.Sprint(target.cmd.Process.Pid)
			m := start(t, mdtraceBin, "-p", pid, "-o", "backtrace leak_track check_unreachable_on_signal",
				"--unreachable-first", "--log", logPath, "--ready-file", dir+"/ready")
			waitFile(t, dir+"/ready")
			io.WriteString(target.stdin, "go\n")
			target.expectLine(t, "ready")

			// From the command line, as dumpsys meminfo --unreachable
			// prints it.
			r := runMdtrace(t, "unreachable", "-p", pid)
			head := "  1055636 bytes in 8 unreachable allocations\n  ABI: 'x86_64'\n\n"
			if r.code != 0 || !strings.HasPrefix(r.stdout, head) {
				t.Fatalf("mdtrace unreachable: status %d, stdout:\n%s\nwant it to start with:\n%s\nstderr:\n%s", r.code, r.stdout, head, r.stderr)
			}
			if n := strings.Count(r.stdout, "bytes unreachable at"); n != 5 || strings.Contains(r.stdout, "contents") {
				t.Errorf("%d leaks, want 5 and no contents:\n%s", n, r.stdout)
			}
			for _, want := range []string{
				"  1048577 bytes unreachable at ", "   referencing 1011 unreachable bytes in 1 allocation\n",
				"  1007 bytes unreachable at ", "   referencing 2017 unreachable bytes in 2 allocations\n",
				"  1012 bytes unreachable at ", "  1006 bytes unreachable at ",
			} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the report lacks %q:\n%s", want, r.stdout)
				}
			}
			// --contents: the lost block's first 32 bytes, exactly.
			r = runMdtrace(t, "unreachable", "--contents", "-p", pid)
			at := lostAtRE.FindStringSubmatch(r.stdout)
			if r.code != 0 || at == nil {
				t.Fatalf("mdtrace unreachable --contents: status %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if want := at[0] + lostContents(t, at[1]); !strings.Contains(r.stdout, want) {
				t.Errorf("the report lacks:\n%s\nin:\n%s", want, r.stdout)
			}
			if n := strings.Count(r.stdout, "bytes of contents:\n"); n != 5 {
				t.Errorf("%d leaks with contents, want 5:\n%s", n, r.stdout)
			}
			// Signal 48 to mdtrace: the check in the log.
			m.cmd.Process.Signal(syscall.Signal(48))
			waitLog(t, logPath, " E libmemunreachable: "+unreachSummary, 3)

			io.WriteString(target.stdin, "go\n")
			target.wait(t)
			if code := m.wait(t); code != 0 {
				t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			log := readFile(t, logPath)
			if n := strings.Count(log, "asked by mdtrace unreachable"); n != 2 {
				t.Errorf("%d checks asked by mdtrace unreachable logged, want 2", n)
			}
			checkClassified(t, log, m.stderr.String(), false)
			// The four blocks only the table made before the attach
			// holds are reachable: the heap outside the blocks mdtrace
			// knows is read as roots, and the log says so.
			if reachable := log[strings.Index(log, "mdtrace: still reachable: "):]; strings.Count(reachable, "leaked block of size 1015 ") != 4 {
				t.Errorf("the four blocks held from before the attach are not all reachable:\n%s", log)
			}
			if !strings.Contains(log, lateNote) {
				t.Errorf("the log lacks %q:\n%s", lateNote, log)
			}
		})
	}
}

// lateNote is what the check says of a process attached to as it ran.
const lateNote = "; the heap outside the blocks made since mdtrace attached is read as roots (blocks from before it may hold the addresses of newer ones): a lost block may look reachable"

// TestUnreachableJemalloc: jemalloc keeps the address of every extent, and
// so of blocks, in the anonymous memory it maps for itself; the check reads
// that memory as heap, not roots, and gives the verdict it gives with
// glibc's malloc, launched or with --no-preload. Attached to as it runs,
// what jemalloc mapped before is read as roots, and the check says so:
// then it may miss lost blocks, and calls no reachable one lost.
func TestUnreachableJemalloc(t *testing.T) {
	needRoot(t)
	needLib(t, jemalloc)
	for _, mode := range []string{"launch", "--no-preload"} {
		t.Run(mode, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			args := []string{"-o", "backtrace leak_track check_unreachable_on_signal", "--unreachable-first", "--log", logPath, "--", prog("unreach_jemalloc")}
			if mode != "launch" {
				args = append([]string{mode}, args...)
			}
			b := start(t, mdtraceBin, args...)
			b.expectLine(t, "ready")
			b.cmd.Process.Signal(syscall.Signal(48))
			waitLog(t, logPath, " E libmemunreachable: "+unreachSummary, 1)
			b.stdin.Write([]byte("go\n"))
			if code := b.wait(t); code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", code, b.stderr.String())
			}
			log := readFile(t, logPath)
			if strings.Contains(log, "read as roots") {
				t.Errorf("the check read memory as roots it should know:\n%s", log)
			}
			checkClassified(t, log, b.stderr.String(), false)
		})
	}
	t.Run("attach", func(t *testing.T) {
		dir := t.TempDir()
		logPath := filepath.Join(dir, "log")
		target := start(t, prog("unreach_jemalloc"), "late")
		target.expectLine(t, "started")
		pid := fmt.Sprint(target.cmd.Process.Pid)
		m := start(t, mdtraceBin, "-p", pid, "-o", "backtrace leak_track", "--log", logPath, "--ready-file", dir+"/ready")
		waitFile(t, dir+"/ready")
		io.WriteString(target.stdin, "go\n")
		target.expectLine(t, "ready")
		r := runMdtrace(t, "unreachable", "-p", pid)
		if r.code != 0 {
			t.Fatalf("mdtrace unreachable: status %d, stderr:\n%s", r.code, r.stderr)
		}
		lost := map[string]bool{"1048577": true, "1012": true, "1011": true, "1009": true, "1008": true, "1007": true, "1006": true}
		for _, m := range regexp.MustCompile(`(?m)^  ([0-9]+) bytes unreachable at `).FindAllStringSubmatch(r.stdout, -1) {
			if !lost[m[1]] {
				t.Errorf("a reachable block of %s bytes is reported unreachable:\n%s", m[1], r.stdout)
			}
		}
		io.WriteString(target.stdin, "go\n")
		target.wait(t)
		if code := m.wait(t); code != 0 {
			t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
		}
		log := readFile(t, logPath)
		for _, want := range []string{lateNote, "; the memory its allocator mapped for itself before mdtrace attached is read as roots: its records of blocks may make lost ones look reachable\n"} {
			if !strings.Contains(log, want) {
				t.Errorf("the log lacks %q:\n%s", want, log)
			}
		}
	})
}

// checkClassified checks testdata/unreach.c's leak report at exit with
// --unreachable-first: its unreachable blocks under the first line, the
// reachable ones under the second, and the bottom line.
//
// With the shim (exact), the check at exit is taken at its last
// destructor, every thread running: the block a register held is
// reachable. Without it, the check comes at the exit stop, after
// exit_group has ended the other threads.
func checkClassified(t *testing.T, log, stderr string, exact bool) {
	t.Helper()
	first := strings.Index(log, "mdtrace: unreachable: ")
	second := strings.Index(log, "mdtrace: still reachable: ")
	if first < 0 || second < first {
		t.Fatalf("no classified leak report:\n%s", log)
	}
	unreachable, reachable := log[first:second], log[second:]
	// The block only a register held is unreachable once exit_group
	// has killed its thread, unless a stale copy remains.
	lost := []string{"1048577", "1012", "1011", "1009", "1008", "1007", "1006"}
	head, bottom := "mdtrace: unreachable: 8 leaked blocks, 1055636 bytes, that nothing in the process points to any more\n",
		": 1055636 bytes in 8 unreachable, "
	if strings.Contains(unreachable, "leaked block of size 1004 ") {
		if exact {
			t.Errorf("the block a register held is reported unreachable at exit")
		}
		lost = append(lost, "1004")
		head, bottom = "mdtrace: unreachable: 9 leaked blocks, 1056640 bytes, that nothing in the process points to any more\n",
			": 1056640 bytes in 9 unreachable, "
	} else if !strings.Contains(reachable, "leaked block of size 1004 ") {
		t.Errorf("the block a register held is in neither group")
	}
	if !strings.HasPrefix(unreachable, head) {
		t.Errorf("the unreachable group starts:\n%.300s\nwant:\n%s", unreachable, head)
	}
	for _, size := range lost {
		if !strings.Contains(unreachable, "leaked block of size "+size+" ") {
			t.Errorf("the block of %s bytes is not among the unreachable ones", size)
		}
	}
	// The cycle's two blocks have one size.
	if n := strings.Count(unreachable, "leaked block of size"); n != len(lost)+1 {
		t.Errorf("%d unreachable blocks listed, want %d", n, len(lost)+1)
	}
	for _, size := range []string{"1001", "1002", "1003", "1005", "1010", "1013", "1014", "1048576"} {
		if !strings.Contains(reachable, "leaked block of size "+size+" ") {
			t.Errorf("the block of %s bytes is not among the reachable ones", size)
		}
	}
	// The bottom line counts both groups, and they add up.
	re := regexp.MustCompile(`mdtrace: ([0-9]+) bytes in ([0-9]+) leaked allocations: ([0-9]+) bytes in ([0-9]+) unreachable, ([0-9]+) bytes in ([0-9]+) still reachable( \([0-9]+ suppressed, [0-9]+ bytes\))?\n`)
	mm := re.FindStringSubmatch(stderr)
	if mm == nil || !strings.Contains(mm[0], bottom) {
		t.Fatalf("stderr lacks the bottom line with %q:\n%s", bottom, stderr)
	}
	n := func(i int) int { v, _ := strconv.Atoi(mm[i]); return v }
	if n(1) != n(3)+n(5) || n(2) != n(4)+n(6) || n(2) != strings.Count(log, "leaked block of size") {
		t.Errorf("bottom line %q does not add up to the %d blocks listed", mm[0], strings.Count(log, "leaked block of size"))
	}
	if !strings.Contains(reachable, fmt.Sprintf("mdtrace: still reachable: %d leaked blocks, %d bytes, ", n(6), n(5))) {
		t.Errorf("the reachable group's line does not say %d blocks, %d bytes:\n%.300s", n(6), n(5), reachable)
	}
}

// TestUnreachableShimSignal: signal 48 sent to the launched process itself
// (the shim passes it on to mdtrace, and waits for the check) checks it, with
// each leak's contents under --unreachable-contents.
func TestUnreachableShimSignal(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	m := start(t, mdtraceBin, "-o", "backtrace leak_track check_unreachable_on_signal", "--unreachable-contents",
		"--unreachable-first", "--log", logPath, "--", prog("unreach_o2"))
	m.expectLine(t, "ready")
	child := childOf(t, m.cmd.Process.Pid)
	syscall.Kill(child, syscall.Signal(48))
	waitLog(t, logPath, " I libmemunreachable: unreachable memory detection done\n", 1)
	waitLog(t, logPath, " E libmemunreachable: "+unreachSummary, 1)
	m.stdin.Write([]byte("go\n"))
	if code := m.wait(t); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := readFile(t, logPath)
	// The log's lines of the lost block, its tag and header cut.
	var body strings.Builder
	for _, l := range strings.SplitAfter(log, "\n") {
		if i := strings.Index(l, " E libmemunreachable: "); i >= 0 {
			body.WriteString(l[i+len(" E libmemunreachable: "):])
		}
	}
	at := lostAtRE.FindStringSubmatch(body.String())
	if at == nil {
		t.Fatalf("no lost block of 1012 bytes in the log:\n%s", log)
	}
	if want := at[0] + lostContents(t, at[1]); !strings.Contains(body.String(), want) {
		t.Errorf("the log lacks:\n%s\nin:\n%s", want, body.String())
	}
	if n := strings.Count(log, "bytes of contents:\n"); n != 5 {
		t.Errorf("%d leaks logged with contents, want 5", n)
	}
	checkClassified(t, log, m.stderr.String(), true)
}

// TestUnreachableCLIErrors: mdtrace unreachable says clearly when no
// mdtrace traces the process, which it needs, and refuses bad usage.
func TestUnreachableCLIErrors(t *testing.T) {
	needRoot(t)
	sleeper := start(t, "sleep", "30")
	pid := fmt.Sprint(sleeper.cmd.Process.Pid)
	r := runMdtrace(t, "unreachable", "-p", pid)
	want := "mdtrace: process " + pid + ": no running mdtrace traces it"
	if r.code != 1 || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "start one first (sudo mdtrace -p "+pid+" sees the blocks allocated from then on") || r.stdout != "" {
		t.Errorf("untraced: status %d, stdout %q, stderr:\n%s\nwant status 1 and %q", r.code, r.stdout, r.stderr, want)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"unreachable"}, 2, "mdtrace: which process? -p PID\n"},
		{[]string{"unreachable", "x"}, 2, "mdtrace: \"x\" is not a process ID\n"},
		{[]string{"unreachable", "-p", "1", "2"}, 2, "mdtrace: unreachable checks one process: -p PID\n"},
		{[]string{"unreachable", "-p", "999999999"}, 1, "mdtrace: process 999999999 does not exist\n"},
	} {
		r := runMdtrace(t, tc.args...)
		if r.code != tc.code || !strings.HasPrefix(r.stderr, tc.stderr) {
			t.Errorf("%v: status %d, stderr %q; want %d, %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
	}
}

// TestUnreachableDebian: Debian's python3, sqlite3 and id leave leaked
// blocks at exit (the runtimes' own, which the default suppressions
// leave out), and every one of them is still reachable, as valgrind says
// (no block definitely lost): the classified report lists none as
// unreachable.
func TestUnreachableDebian(t *testing.T) {
	needRoot(t)
	re := regexp.MustCompile(`mdtrace: [0-9]+ bytes in ([0-9]+) leaked allocations: 0 bytes in 0 unreachable, [0-9]+ bytes in ([0-9]+) still reachable\n`)
	for _, argv := range [][]string{
		{"/usr/bin/python3", "-c", "pass"},
		{"/usr/bin/sqlite3", ":memory:", "select 1;"},
		{"/usr/bin/id"},
	} {
		t.Run(filepath.Base(argv[0]), func(t *testing.T) {
			if _, err := exec.LookPath(argv[0]); err != nil {
				t.Skipf("%s is not installed", argv[0])
			}
			args := append([]string{"-o", "backtrace leak_track", "--unreachable-first", "--no-default-suppressions",
				"--log", filepath.Join(t.TempDir(), "log"), "--"}, argv...)
			r := runMdtrace(t, args...)
			m := re.FindStringSubmatch(r.stderr)
			if r.code != 0 || m == nil || m[1] != m[2] || m[1] == "0" {
				t.Errorf("status %d, stderr:\n%s\nwant a bottom line of leaks all still reachable", r.code, r.stderr)
			}
		})
	}
}
