//go:build linux

package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
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
				// unreachable then, unless a stale copy remains.
				n := strings.Count(log, "leaked block of size")
				bottom := "mdtrace: 1055636 bytes in 8 unreachable leaked allocations ("
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
// indirectly lost) gives the same verdict on the same program. Only the
// -O0 build: valgrind's verdict on the -O2 one changes from run to run
// (the stale copies its threads' teardown leaves).
func TestUnreachableValgrind(t *testing.T) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Skip("valgrind is not installed")
	}
	re := regexp.MustCompile(`(definitely|indirectly) lost: ([0-9,]+) bytes in ([0-9,]+) blocks`)
	for _, build := range []string{"unreach_o0"} {
		cmd := exec.Command(vg, "--leak-check=full", prog(build))
		cmd.Stdin = strings.NewReader("go\n")
		out, _ := cmd.CombinedOutput()
		var bytes, blocks int
		for _, m := range re.FindAllStringSubmatch(string(out), -1) {
			n, k := atoiComma(m[2]), atoiComma(m[3])
			bytes += n
			blocks += k
		}
		if bytes != 1055636 || blocks != 8 {
			t.Errorf("%s: valgrind says %d bytes in %d blocks lost, mdtrace 1055636 in 8:\n%s", build, bytes, blocks, out)
		}
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
