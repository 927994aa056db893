//go:build linux

package tracer

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	f := strings.FieldsFunc(KernelRelease(), func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 {
		t.Fatalf("kernel release %q", KernelRelease())
	}
	a, _ := strconv.Atoi(f[0])
	b, _ := strconv.Atoi(f[1])
	return a > major || a == major && b >= minor
}

// TestUprobeSessions: where the kernel has uprobe sessions (6.13), the
// allocator's probes are one session link, and testdata/sampled's leaks
// (20000 blocks of 64 bytes, 2000 of 4096, 2000 grown by realloc to 2048)
// are counted exactly, every call's return seen; sampled, the calls the
// sampling passes over leave nothing in flight. Elsewhere the probes are
// made apart, with the same figures.
func TestUprobeSessions(t *testing.T) {
	needProbes(t)
	want := kernelAtLeast(t, 6, 13)
	// The programs' run counts, for as long as the test runs.
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatalf("enabling the programs' statistics: %v", err)
	}
	defer stats.Close()
	for _, sample := range []uint64{0, 4096} {
		probes, err := LoadProbes(ProbeConfig{SampleBytes: sample, NoBatch: true, MaxAllocs: 1 << 16})
		if err != nil {
			t.Fatalf("LoadProbes: %v", err)
		}
		cmd := exec.Command(testProg(t, "sampled"))
		// Out of the reach of the e2e tests' --all --inject, which may
		// be running beside this one.
		cmd.Env = append(os.Environ(), "SAMPLED_WAIT=1", "SAMPLED_SECCOMP=1")
		stdin, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
			t.Fatalf("sampled said %q (%v)", line, err)
		}
		pid := cmd.Process.Pid
		lib, err := AllocatorOfRunning(pid)
		if err != nil {
			t.Fatal(err)
		}
		if err := probes.Attach(pid, lib); err != nil {
			t.Fatalf("Attach: %v", err)
		}
		if got := probes.Sessions(); got != want {
			t.Errorf("sampling %d: uprobe sessions %v on %s, want %v", sample, got, KernelRelease(), want)
		}
		io.WriteString(stdin, "go\n")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("sampled: %v", err)
		}
		totals, err := probes.Totals()
		if err != nil {
			t.Fatal(err)
		}
		c, err := probes.Counters()
		if err != nil {
			t.Fatal(err)
		}
		tot := totals[pid]
		if sample == 0 && (tot.Blocks != 24000 || tot.Bytes != 20000*64+2000*4096+2000*2048) {
			t.Errorf("exact: %v blocks, %v bytes; want 24000, %d", tot.Blocks, tot.Bytes, 20000*64+2000*4096+2000*2048)
		}
		if sample != 0 && (c.Unsampled == 0 || tot.Sampled < 2000) {
			t.Errorf("sampled: %d allocations passed over, %d sampled; want some, and the 2000 of 4096 bytes at least", c.Unsampled, tot.Sampled)
		}
		if c.MissedReturn != 0 || c.Nested != 0 || c.UnknownFrees != 0 {
			t.Errorf("sampling %d: %d missed returns, %d nested calls, %d unknown frees; want none", sample, c.MissedReturn, c.Nested, c.UnknownFrees)
		}
		if want {
			// One run at each call's entry, and at the returns of the
			// allocations sampled and of the reallocs (2000 of them
			// through realloc(NULL), 4000 growing): none at a free's or
			// at the return of a malloc passed over.
			st, err := probes.objs.AllocSession.Stats()
			if err != nil {
				t.Fatal(err)
			}
			calls := c.Allocs + c.Unsampled + c.Frees + c.UnsampledFrees
			if max := calls + c.Allocs + 6000; st.RunCount > max {
				t.Errorf("sampling %d: the session program ran %d times for %d calls; want at most %d", sample, st.RunCount, calls, max)
			}
			t.Logf("sampling %d: the session program ran %d times for %d calls", sample, st.RunCount, calls)
		}
		probes.Close()
	}
}
