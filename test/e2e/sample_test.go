//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSampleBytes: with --sample-bytes, the shim sends only a sample of the
// allocations to the probes, and the heap dump's counts estimate the real
// ones (checkSampledDump). The leak report lists only the sampled blocks,
// and says what they stand for.
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
	nums := checkSampledDump(t, readFile(t, dumps[0]), interval)
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
		{[]string{"--sample-bytes", "4096", "--program", "x", "-o", "backtrace record_allocs=1000"}, "mdtrace: option record_allocs needs every allocator call: it cannot be used with --sample-bytes\n"},
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
	m := attachGo(t, target, dir, "--inject", "--sample-bytes", fmt.Sprint(interval),
		"-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h", "--log", dir+"/log")
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
	checkSampledDump(t, readFile(t, dumps[0]), interval)
	log := readFile(t, dir+"/log")
	if !regexp.MustCompile(`mdtrace: sampled one allocation every 4096 bytes on average: the \d+ leaked blocks listed stand for about \d+ blocks, \d+ bytes\n`).MatchString(log) {
		t.Errorf("no estimate line in the log:\n%s", log[max(0, len(log)-2000):])
	}
}

// sampledLeaks are testdata/sampled's leaks, blocks by size: 20000 of 64
// bytes, 2000 of 4096 and 2000 of 2048 (grown by realloc from 16 and 256).
var sampledLeaks = map[uint64]float64{64: 20000, 4096: 2000, 2048: 2000}

// sampleChance is the probability that a block of size bytes is sampled
// with a mean interval of interval bytes: 1 - exp(-size/interval), and 1
// from the interval on, independently of every other block.
func sampleChance(size, interval uint64) float64 {
	if size >= interval {
		return 1
	}
	return -math.Expm1(-float64(size) / float64(interval))
}

// checkSampledDump checks the heap dump of testdata/sampled's exit, sampled
// one allocation every interval bytes on average, and returns its
// estimated blocks by size: sizes exact (no block of another size, so no
// sampled block whose free or realloc was missed), the blocks of the
// interval or more exact, the others within five standard deviations of
// the sampling: the estimate is K/p for K ~ Binomial(n, p).
func checkSampledDump(t *testing.T, dump string, interval uint64) map[uint64]uint64 {
	t.Helper()
	nums := map[uint64]uint64{}
	for line := range strings.SplitSeq(dump, "\n") {
		var z, size, num uint64
		if _, err := fmt.Sscanf(line, "z %d  sz %d  num %d", &z, &size, &num); err == nil {
			nums[size] += num
		}
	}
	if len(nums) != 3 {
		t.Errorf("record sizes %v, want 64, 2048 and 4096 only", nums)
	}
	for size, real := range sampledLeaks {
		p := sampleChance(size, interval)
		sd := math.Sqrt(real*p*(1-p)) / p
		if got := float64(nums[size]); math.Abs(got-real) > 5*sd {
			t.Errorf("%d-byte blocks: estimated %v, want %v within %.0f", size, got, real, 5*sd)
		}
	}
	return nums
}

// checkSampledTotals checks estimates of testdata/sampled's leaked blocks
// and bytes, in all, within five standard deviations: a block of s bytes
// sampled with probability p adds s/p bytes, of variance s^2 (1-p)/p.
func checkSampledTotals(t *testing.T, what string, blocks, bytes float64, interval uint64) {
	t.Helper()
	var n, b, vn, vb float64
	for size, real := range sampledLeaks {
		p, s := sampleChance(size, interval), float64(size)
		n += real
		b += real * s
		vn += real * (1 - p) / p
		vb += real * s * s * (1 - p) / p
	}
	if sd := math.Sqrt(vn); math.Abs(blocks-n) > 5*sd {
		t.Errorf("%s: %v blocks estimated, want %v within %.0f", what, blocks, n, 5*sd)
	}
	if sd := math.Sqrt(vb); math.Abs(bytes-b) > 5*sd {
		t.Errorf("%s: %v bytes estimated, want %v within %.0f", what, bytes, b, 5*sd)
	}
}

// checkSampledCount checks the probes' line of what they sampled of
// testdata/sampled's 48000 allocations: 20000 pairs of 64 bytes and 20000
// leaks of 64, 2000 of 4096, and 2000 each of 16, then 256 (realloc) and
// 2048 (realloc). The count sampled is a sum of independent Bernoulli
// draws: within five standard deviations of its mean.
func checkSampledCount(t *testing.T, log string, interval uint64) {
	t.Helper()
	checkSampledCountWith(t, log, interval, 0)
}

// checkSampledCountWith is checkSampledCount for a process that also
// allocates extra blocks of the interval or more, each sampled, none
// freed (a runtime's blocks from before main).
func checkSampledCountWith(t *testing.T, log string, interval uint64, extra int) {
	t.Helper()
	m := regexp.MustCompile(fmt.Sprintf(`mdtrace: sampled (\d+) of (\d+) allocations \(one every %d bytes on average, a block of %d bytes or more always\): the others took no backtrace and no room in the table; (\d+) frees of blocks not sampled \(or allocated before mdtrace\) were passed over\n`, interval, interval)).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no line of what the probes sampled:\n%s", log[max(0, len(log)-3000):])
	}
	mean, variance := float64(extra), 0.0
	for size, n := range map[uint64]float64{64: 40000, 4096: 2000, 16: 2000, 256: 2000, 2048: 2000} {
		p := sampleChance(size, interval)
		mean += n * p
		variance += n * p * (1 - p)
	}
	sampled, _ := strconv.ParseFloat(m[1], 64)
	if m[2] != fmt.Sprint(48000+extra) || math.Abs(sampled-mean) > 5*math.Sqrt(variance) {
		t.Errorf("sampled %s of %s allocations, want %.0f within %.0f of %d", m[1], m[2], mean, 5*math.Sqrt(variance), 48000+extra)
	}
	// The frees: 20000 of the pairs, 4000 by realloc; those of sampled
	// blocks are not passed over.
	if freed, _ := strconv.Atoi(m[3]); freed > 24000 || freed < 24000-int(sampled)+extra {
		t.Errorf("%d frees passed over, want at most 24000 and at least %v", freed, 24000-int(sampled)+extra)
	}
}

// TestSampleBytesProbes: --sample-bytes with the probes on the allocator
// (-p without --inject, --no-preload, --program) samples in the probes by the shim's
// law: the exit heap dump and the leak report's estimate line find
// testdata/sampled's leaks within five standard deviations, its 4096-byte
// blocks exactly; the probes say how many of its 48000 allocations they
// sampled, and the frees of the others are not unknown pointers.
func TestSampleBytesProbes(t *testing.T) {
	needRoot(t)
	const interval = 4096
	for _, mode := range []string{"-p", "--no-preload", "--program"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			opts := []string{"--sample-bytes", fmt.Sprint(interval), "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix=" + dir + "/h", "--log", dir + "/log"}
			var stderr string
			if mode == "-p" {
				target := startEnv(t, []string{"SAMPLED_WAIT=1"}, prog("sampled"))
				target.expectLine(t, "ready")
				stderr = attachGo(t, target, dir, opts...).stderr.String()
			} else if mode == "--program" {
				// Traced from its first instruction, as it executes.
				m := start(t, mdtraceBin, append([]string{"--program", "sampled", "--ready-file", dir + "/ready"}, opts...)...)
				waitFile(t, dir+"/ready")
				target := start(t, prog("sampled"))
				if code := target.wait(t); code != 0 {
					t.Errorf("sampled exit status %d", code)
				}
				waitLogLine(t, dir+"/log", fmt.Sprintf("Dumping to file: %s/h.%d.exit.txt", dir, target.cmd.Process.Pid))
				m.cmd.Process.Signal(syscall.SIGINT)
				if code := m.wait(t); code != 0 {
					t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
				}
				stderr = m.stderr.String()
			} else {
				r := runMdtrace(t, append(append([]string{"--no-preload"}, opts...), "--", prog("sampled"))...)
				if r.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
				}
				stderr = r.stderr
			}
			if want := fmt.Sprintf("mdtrace: sampling one allocation every %d bytes on average: block counts and byte totals in the reports are estimates, sizes are exact\n", interval); !strings.HasPrefix(stderr, want) {
				t.Errorf("stderr does not start with %q:\n%s", want, stderr)
			}
			dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
			if len(dumps) != 1 {
				t.Fatalf("dumps %v; stderr:\n%s", dumps, stderr)
			}
			nums := checkSampledDump(t, readFile(t, dumps[0]), interval)
			log := readFile(t, dir+"/log")
			listed := strings.Count(log, " leaked block of size ")
			m := regexp.MustCompile(`mdtrace: sampled one allocation every 4096 bytes on average: the (\d+) leaked blocks listed stand for about (\d+) blocks, (\d+) bytes\n`).FindStringSubmatch(log)
			if m == nil {
				t.Fatalf("no estimate line in the log:\n%s", log[max(0, len(log)-2000):])
			}
			if n, _ := strconv.Atoi(m[1]); n != listed {
				t.Errorf("the estimate line counts %d blocks, the report lists %d", n, listed)
			}
			blocks, _ := strconv.ParseFloat(m[2], 64)
			bytes, _ := strconv.ParseFloat(m[3], 64)
			if uint64(blocks) != nums[64]+nums[4096]+nums[2048] {
				t.Errorf("the estimate line says %v blocks, the dump %d", blocks, nums[64]+nums[4096]+nums[2048])
			}
			checkSampledTotals(t, "the leak report", blocks, bytes, interval)
			checkSampledCount(t, log, interval)
			if strings.Contains(log, "ALLOCATION") || strings.Contains(log, "unknown") {
				t.Errorf("pointer errors in the log:\n%s", log)
			}
		})
	}
}

// TestAllAuditSampled: --all samples by default, one allocation every 4096
// bytes on average, and says so; testdata/sampled, started during the
// audit and ended before its end, is ranked by estimates of its leaks
// within five standard deviations, from fewer blocks in the table, and
// its largest site, leak_large's 4096-byte blocks, is exact.
func TestAllAuditSampled(t *testing.T) {
	needRoot(t)
	const interval = 4096
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--all", "--backtrace", "--format", "json", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	if want := fmt.Sprintf("mdtrace: sampling one allocation every %d bytes on average (--sample-bytes 0 counts every one): block counts and byte totals in the summaries are estimates, sizes are exact\n", interval); !strings.Contains(m.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, m.stderr.String())
	}
	// It waits until a scan (every second) has looked at it, so that its
	// frames are named after it ends.
	target := startEnv(t, []string{"SAMPLED_WAIT=1"}, prog("sampled"))
	target.expectLine(t, "ready")
	time.Sleep(1500 * time.Millisecond)
	io.WriteString(target.stdin, "go\n")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("sampled exit status %d", code)
	}
	out := m.interrupt(t)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	type sampledRow struct {
		auditRow
		Sampled int64 `json:"sampled_blocks"`
	}
	var a struct {
		SampleBytes uint64       `json:"sample_bytes"`
		Ranking     []sampledRow `json:"ranking"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &a); err != nil {
		t.Fatalf("the last summary is not JSON: %v\n%s", err, out)
	}
	if a.SampleBytes != interval {
		t.Errorf("sample_bytes %d, want %d", a.SampleBytes, interval)
	}
	pid := target.cmd.Process.Pid
	i := slices.IndexFunc(a.Ranking, func(r sampledRow) bool { return r.PID == pid })
	if i < 0 {
		t.Fatalf("process %d is not in the ranking:\n%s", pid, lines[len(lines)-1])
	}
	r := a.Ranking[i]
	if !r.Exited {
		t.Errorf("process %d not exited", pid)
	}
	checkSampledTotals(t, "the ranking", float64(r.AddedBlocks), float64(r.AddedBytes), interval)
	// About 310 + 2000 + 787 blocks in the table for 24000.
	if r.Sampled < 2000 || r.Sampled > 4000 {
		t.Errorf("%d blocks sampled, want from 2000 to 4000", r.Sampled)
	}
	if len(r.Sites) == 0 {
		t.Fatalf("process %d has no sites", pid)
	}
	top := r.Sites[0]
	if top.Blocks != 2000 || top.Bytes != 2000*4096 || len(top.Frames) == 0 || top.Frames[0].Function != "leak_large" {
		t.Errorf("largest site %+v, want leak_large's 2000 blocks, 8192000 bytes", top)
	}
}

// TestSampleBytesProbesStats: --stats with the probes sampling takes only
// the sampled calls, and says so: a sampled block that a realloc not
// sampled moved is freed in the figures, and no free is of a block no
// call allocated.
func TestSampleBytesProbesStats(t *testing.T) {
	needRoot(t)
	r := runMdtrace(t, "--no-preload", "--sample-bytes", "4096", "--stats", "-o", "backtrace", "--", prog("sampled"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "\nNote: --sample-bytes: only the sampled allocations count\n") {
		t.Errorf("no note of the sampling:\n%s", r.stderr)
	}
	for _, bad := range []string{"whose free was not seen", "frees of a pointer no call seen allocated"} {
		if strings.Contains(r.stderr, bad) {
			t.Errorf("%q in the statistics:\n%s", bad, r.stderr)
		}
	}
	// Every one of the 2000 blocks of 4096 bytes is sampled, and live at the end.
	if !regexp.MustCompile(`\n2000 allocations \([0-9.]+%\), 8192000 bytes, 0 temporary, peak 8192000 bytes:\n`).MatchString(r.stderr) {
		t.Errorf("no site of the 2000 blocks of 4096 bytes:\n%s", r.stderr)
	}
}
