//go:build linux

package e2e

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSampleBytes: with --sample-bytes, the shim sends only a sample of the
// allocations to the probes, and the heap dump's counts estimate the real
// ones: 20000 blocks of 64 bytes, 2000 of 4096 and 2000 of 2048 (grown by
// realloc from 16 and 256 bytes) leaked, within five standard deviations of
// the sampling (each block of s bytes is sampled with probability
// p = 1 - exp(-s/N), independently), sizes exact: no block of another size,
// so no sampled block whose free or realloc was missed. The leak report
// lists only the sampled blocks, and says what they stand for.
func TestSampleBytes(t *testing.T) {
	needRoot(t)
	const interval = 4096
	dir := t.TempDir()
	r := runMdtrace(t, "--sample-bytes", fmt.Sprint(interval), "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h",
		"--log", dir+"/log", "--", prog("sampled"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	if want := fmt.Sprintf("mdtrace: sampling one allocation every %d bytes on average: block counts and byte totals in the reports are estimates, sizes are exact\n", interval); !strings.HasPrefix(r.stderr, want) {
		t.Errorf("stderr does not start with %q:\n%s", want, r.stderr)
	}
	dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
	if len(dumps) != 1 {
		t.Fatalf("dumps %v", dumps)
	}
	nums := map[uint64]uint64{}
	for line := range strings.SplitSeq(readFile(t, dumps[0]), "\n") {
		var z, size, num uint64
		if _, err := fmt.Sscanf(line, "z %d  sz %d  num %d", &z, &size, &num); err == nil {
			nums[size] += num
		}
	}
	if len(nums) != 3 {
		t.Errorf("record sizes %v, want 64, 2048 and 4096 only", nums)
	}
	for size, real := range map[uint64]float64{64: 20000, 4096: 2000, 2048: 2000} {
		p := -math.Expm1(-float64(size) / interval)
		// The estimate is K/p for K ~ Binomial(real, p).
		sd := math.Sqrt(real*p*(1-p)) / p
		if got := float64(nums[size]); math.Abs(got-real) > 5*sd {
			t.Errorf("%d-byte blocks: estimated %v, want %v within %.0f", size, got, real, 5*sd)
		}
	}
	log := readFile(t, dir+"/log")
	listed := strings.Count(log, " leaked block of size ")
	// About 310 + 1264 + 787 blocks are sampled; a mean far below the 24000.
	if listed == 0 || listed > 4000 {
		t.Errorf("%d leaked blocks listed: not a sample of 24000", listed)
	}
	m := regexp.MustCompile(`mdtrace: sampled one allocation every 4096 bytes on average: the (\d+) leaked blocks listed stand for about (\d+) blocks, (\d+) bytes\n`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no estimate line in the log:\n%s", log[max(0, len(log)-2000):])
	}
	if n, _ := strconv.Atoi(m[1]); n != listed {
		t.Errorf("the estimate line counts %d blocks, the report lists %d", n, listed)
	}
	if est, _ := strconv.ParseUint(m[2], 10, 64); est != nums[64]+nums[4096]+nums[2048] {
		t.Errorf("the estimate line says %d blocks, the dump %d", est, nums[64]+nums[4096]+nums[2048])
	}
	os.Remove(dumps[0])
}

// TestSampleBytesUsage: the usage errors of --sample-bytes that TestBadInput
// does not list, with their exact messages and exit status 2.
func TestSampleBytesUsage(t *testing.T) {
	const help = "Run 'mdtrace --help' for usage.\n"
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"--sample-bytes", "4k", "--", "true"}, "mdtrace: invalid argument \"4k\" for \"--sample-bytes\" flag: strconv.ParseUint: parsing \"4k\": invalid syntax\n" + help},
		{[]string{"--sample-bytes", "", "--", "true"}, "mdtrace: invalid argument \"\" for \"--sample-bytes\" flag: strconv.ParseUint: parsing \"\": invalid syntax\n" + help},
		{[]string{"--sample-bytes", "4096", "--program", "x"}, "mdtrace: --sample-bytes samples in the shim, preloaded into a launched command or loaded with -p PID --inject: not with -p alone, --program or --all\n" + help},
		{[]string{"--sample-bytes", "4096", "--all"}, "mdtrace: --sample-bytes samples in the shim, preloaded into a launched command or loaded with -p PID --inject: not with -p alone, --program or --all\n" + help},
		{[]string{"--sample-bytes", "4096", "-o", "backtrace record_allocs=1000", "--", "true"}, "mdtrace: option record_allocs needs every allocator call: it cannot be used with --sample-bytes\n"},
	} {
		if r := runMdtrace(t, tc.args...); r.code != 2 || r.stderr != tc.stderr {
			t.Errorf("mdtrace %q: status %d, stderr:\n%q\nwant 2 and:\n%q", tc.args, r.code, r.stderr, tc.stderr)
		}
	}
}

// TestSampleBytesInject: --sample-bytes with -p --inject samples in the
// shim loaded into the running process as in a launched command: sampled
// attached before its allocations, the exit heap dump's counts estimate
// the blocks leaked within five standard deviations, sizes exact.
func TestSampleBytesInject(t *testing.T) {
	needRoot(t)
	const interval = 4096
	dir := t.TempDir()
	target := startEnv(t, []string{"SAMPLED_WAIT=1"}, prog("sampled"))
	target.expectLine(t, "ready")
	pid := fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "--inject", "--sample-bytes", fmt.Sprint(interval),
		"-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h",
		"--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("sampled exit status %d", code)
	}
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	if strings.Contains(m.stderr.String(), ", in batches") {
		t.Errorf("mdtrace batches while sampling; stderr:\n%s", m.stderr.String())
	}
	if want := fmt.Sprintf(" GOT slots, sampling one allocation every %d bytes on average (block counts and byte totals in the reports are estimates, sizes are exact); ", interval); !strings.Contains(m.stderr.String(), want) {
		t.Errorf("mdtrace stderr:\n%s\nwant %q in it", m.stderr.String(), want)
	}
	dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
	if len(dumps) != 1 {
		t.Fatalf("dumps %v; mdtrace stderr:\n%s", dumps, m.stderr.String())
	}
	nums := map[uint64]uint64{}
	for line := range strings.SplitSeq(readFile(t, dumps[0]), "\n") {
		var z, size, num uint64
		if _, err := fmt.Sscanf(line, "z %d  sz %d  num %d", &z, &size, &num); err == nil {
			nums[size] += num
		}
	}
	if len(nums) != 3 {
		t.Errorf("record sizes %v, want 64, 2048 and 4096 only", nums)
	}
	for size, real := range map[uint64]float64{64: 20000, 4096: 2000, 2048: 2000} {
		p := -math.Expm1(-float64(size) / interval)
		sd := math.Sqrt(real*p*(1-p)) / p
		if got := float64(nums[size]); math.Abs(got-real) > 5*sd {
			t.Errorf("%d-byte blocks: estimated %v, want %v within %.0f", size, got, real, 5*sd)
		}
	}
	log := readFile(t, dir+"/log")
	if !regexp.MustCompile(`mdtrace: sampled one allocation every 4096 bytes on average: the \d+ leaked blocks listed stand for about \d+ blocks, \d+ bytes\n`).MatchString(log) {
		t.Errorf("no estimate line in the log:\n%s", log[max(0, len(log)-2000):])
	}
}
