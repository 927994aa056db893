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

// TestSampleBytesShimAttached: a command launched by one mdtrace with
// --sample-bytes has a shim that samples by itself; another mdtrace that
// attaches to it with -p reads the shim's interval. With another interval
// it refuses, with a clear error and status 1, and leaves the process
// alone; with the same one its probes take each call the shim reports
// instead of sampling it twice, and without --sample-bytes the reports
// weigh the calls with the shim's interval: either way the exit heap dump
// finds testdata/sampled's leaks within five standard deviations, its
// 4096-byte blocks exactly.
func TestSampleBytesShimAttached(t *testing.T) {
	needRoot(t)
	const interval = 4096
	for _, tc := range []struct {
		name string
		args []string
		line string
	}{
		{"same", []string{"--sample-bytes", fmt.Sprint(interval)}, "mdtrace: the shim of process %s samples one allocation every 4096 bytes by itself: the probes take each call it reports, without sampling them again\n"},
		{"none", nil, "mdtrace: the shim of process %s samples one allocation every 4096 bytes by itself (it was launched by mdtrace with --sample-bytes 4096): block counts and byte totals in the reports are estimates, sizes are exact\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			outer := startEnv(t, []string{"SAMPLED_WAIT=1"}, mdtraceBin, "--sample-bytes", fmt.Sprint(interval), "--log", dir+"/outer", "--ready-file", dir+"/outer-ready", "--", prog("sampled"))
			outer.expectLine(t, "ready")
			waitFile(t, dir+"/outer-ready")
			pid := strings.TrimSpace(readFile(t, dir+"/outer-ready"))

			if tc.name == "same" {
				r := runMdtrace(t, "-p", pid, "--sample-bytes", "8192")
				want := fmt.Sprintf("mdtrace: sampling one allocation every 8192 bytes on average: block counts and byte totals in the reports are estimates, sizes are exact\nmdtrace: the shim of process %s samples one allocation every 4096 bytes by itself (it was launched by mdtrace with --sample-bytes 4096): sampling it again every 8192 bytes would make the estimates wrong; attach with --sample-bytes 4096, or without --sample-bytes\n", pid)
				if r.code != 1 || r.stderr != want {
					t.Errorf("-p with another interval: status %d, stderr:\n%q\nwant 1 and:\n%q", r.code, r.stderr, want)
				}
			}

			m := start(t, mdtraceBin, append([]string{"-p", pid, "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix=" + dir + "/h", "--log", dir + "/log", "--ready-file", dir + "/ready"}, tc.args...)...)
			waitFile(t, dir+"/ready")
			io.WriteString(outer.stdin, "go\n")
			outer.stdin.Close()
			if code := outer.wait(t); code != 0 {
				t.Errorf("the launching mdtrace's exit status %d; stderr:\n%s", code, outer.stderr.String())
			}
			if code := m.wait(t); code != 0 {
				t.Fatalf("mdtrace -p exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			stderr := m.stderr.String()
			if want := fmt.Sprintf(tc.line, pid); !strings.Contains(stderr, want) {
				t.Errorf("mdtrace -p stderr:\n%s\nwant %q in it", stderr, want)
			}
			dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
			if len(dumps) != 1 {
				t.Fatalf("dumps %v; stderr:\n%s", dumps, stderr)
			}
			checkSampledDump(t, readFile(t, dumps[0]), interval)
			log := readFile(t, dir+"/log")
			if !strings.Contains(log, "mdtrace: sampled one allocation every 4096 bytes on average: the ") {
				t.Errorf("no estimate line in the log:\n%s", log[max(0, len(log)-2000):])
			}
			if strings.Contains(log, "ALLOCATION") || strings.Contains(log, "unknown") {
				t.Errorf("pointer errors in the log:\n%s", log)
			}
		})
	}
}

// TestSampleBytesProbesPython: Debian's python3, attached to with -p
// --sample-bytes while it waits, then holding 10000 bytearrays of 1000
// bytes (each a malloc of 1001: CPython's small-object allocator passes
// blocks over 512 bytes to malloc) and 500 of 5000 (5001), and leaving
// with os._exit so that they are still there: the exit heap dump's
// estimate of the small ones is within five standard deviations of the
// sampling, the large ones, over the interval, are exact.
func TestSampleBytesProbesPython(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	const interval = 4096
	dir := t.TempDir()
	script := "import os, sys\nprint('ready', flush=True)\nsys.stdin.readline()\n" +
		"small = [bytearray(1000) for _ in range(10000)]\nlarge = [bytearray(5000) for _ in range(500)]\nos._exit(0)\n"
	target := start(t, "/usr/bin/python3", "-c", script)
	target.expectLine(t, "ready")
	m := attachGo(t, target, dir, "--sample-bytes", fmt.Sprint(interval),
		"-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h", "--log", dir+"/log")
	dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
	if len(dumps) != 1 {
		t.Fatalf("dumps %v; stderr:\n%s", dumps, m.stderr.String())
	}
	nums := dumpNums(readFile(t, dumps[0]))
	checkEstimate(t, "1001-byte blocks", float64(nums[1001]), 10000, sampleChance(1001, interval))
	if nums[5001] != 500 {
		t.Errorf("5001-byte blocks: %d, want 500 exactly", nums[5001])
	}
}

// TestSampleBytesProbesJemalloc: testdata/sampled linked with Debian's
// libjemalloc2, traced with --no-preload --sample-bytes, the probes on
// jemalloc: its leaks estimated as with glibc (checkSampledDump,
// checkSampledTotals), its 4096-byte blocks exact, and the probes' count
// of what they sampled of its 48000 allocations within bounds. jemalloc
// needs libstdc++, whose emergency exception pool is one more block, of
// 72704 bytes, allocated before main and never freed: there, exactly.
func TestSampleBytesProbesJemalloc(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat(jemalloc); err != nil {
		t.Skip("no " + jemalloc)
	}
	const interval = 4096
	dir := t.TempDir()
	r := runMdtrace(t, "--no-preload", "--sample-bytes", fmt.Sprint(interval), "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h",
		"--log", dir+"/log", "--", prog("sampled_jemalloc"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
	if len(dumps) != 1 {
		t.Fatalf("dumps %v; stderr:\n%s", dumps, r.stderr)
	}
	const pool = 72704
	dump := readFile(t, dumps[0])
	if n := dumpNums(dump)[pool]; n != 1 {
		t.Errorf("%d blocks of %d bytes, want libstdc++'s pool, 1", n, pool)
	}
	var kept []string
	for line := range strings.SplitSeq(dump, "\n") {
		if n := dumpNums(line); n[pool] == 0 {
			kept = append(kept, line)
		}
	}
	nums := checkSampledDump(t, strings.Join(kept, "\n"), interval)
	log := readFile(t, dir+"/log")
	m := regexp.MustCompile(`mdtrace: sampled one allocation every 4096 bytes on average: the (\d+) leaked blocks listed stand for about (\d+) blocks, (\d+) bytes\n`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no estimate line in the log:\n%s", log[max(0, len(log)-2000):])
	}
	blocks, _ := strconv.ParseFloat(m[2], 64)
	bytes, _ := strconv.ParseFloat(m[3], 64)
	if uint64(blocks) != nums[64]+nums[4096]+nums[2048]+1 {
		t.Errorf("the estimate line says %v blocks, the dump %d", blocks, nums[64]+nums[4096]+nums[2048]+1)
	}
	checkSampledTotals(t, "the leak report", blocks-1, bytes-pool, interval)
	checkSampledCountWith(t, log, interval, 1)
	if strings.Contains(log, "ALLOCATION") || strings.Contains(log, "unknown") {
		t.Errorf("pointer errors in the log:\n%s", log)
	}
}

// dumpNums returns a heap dump's blocks by size.
func dumpNums(dump string) map[uint64]uint64 {
	nums := map[uint64]uint64{}
	for line := range strings.SplitSeq(dump, "\n") {
		var z, size, num uint64
		if _, err := fmt.Sscanf(line, "z %d  sz %d  num %d", &z, &size, &num); err == nil {
			nums[size] += num
		}
	}
	return nums
}

// checkEstimate checks an estimate of n blocks each sampled with
// probability p, K/p for K ~ Binomial(n, p), within five standard
// deviations.
func checkEstimate(t *testing.T, what string, got, n, p float64) {
	t.Helper()
	if sd := math.Sqrt(n*p*(1-p)) / p; math.Abs(got-n) > 5*sd {
		t.Errorf("%s: estimated %v, want %v within %.0f", what, got, n, 5*sd)
	}
}
