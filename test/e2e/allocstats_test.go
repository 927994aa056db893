//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// statsBlock cuts the --stats block of a process out of mdtrace's
// standard error: from the line after its title to the end of its call
// sites.
func statsBlock(t *testing.T, stderr string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)mdtrace: statistics of process \d+ \([^)]*\):\n(.*?\nCall sites.*?)(\nmdtrace: |\n[0-9]{2}-[0-9]{2} |$)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no statistics in:\n%s", stderr)
	}
	return m[1]
}

// leakyStats is what --stats says of testdata/leaky, worked out from its
// source: 13 blocks leaked, 10,000 churned through a ring of 64, a calloc
// grown by realloc to 5000 bytes and freed (the peak), and 7 temporary
// blocks (the grown calloc's three, the memalign freed at once, the
// realloc(p, 0), leak_realloc_grow's malloc(10) and the ring's last).
const leakyStats = `Calls: 20023 (malloc 10006, calloc 2, memalign 6, realloc 7, free 10002)
Allocations: 10019, 663444 bytes in total (66.2 bytes on average)
Temporary allocations: 7 (0.1% of the allocations), freed with no other allocation by their thread between
Peak live heap: 21194 bytes in 14 blocks, at TIME after the first call (call 20020 of 20023)
Live at the end: 16194 bytes in 13 blocks
1 allocating calls returned NULL

Allocations by size, in powers of two:
       9-16 bytes          1   0.0% #
      17-32 bytes        154   1.5% ##
      33-64 bytes       4924  49.1% ########################################
     65-128 bytes       4925  49.2% ########################################
    129-256 bytes          0   0.0%
    257-512 bytes          0   0.0%
   513-1024 bytes         12   0.1% #
  1025-2048 bytes          1   0.0% #
  2049-4096 bytes          1   0.0% #
  4097-8192 bytes          1   0.0% #
`

var peakTime = regexp.MustCompile(`at [0-9.]+(µs|ms|s) after`)

// TestStats: --stats at a process's exit, in each launch mode, gives the
// figures worked out from the program's source, and its call sites by
// allocations and by peak with their backtraces; mdtrace stats reads the
// record_allocs file of the same run to the same figures, and says that a
// record file has no call sites.
func TestStats(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			r := runMdtrace(t, modeFlag(mode.flag), "--stats", "-o", "backtrace record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("leaky"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			block := statsBlock(t, r.stderr)
			got := peakTime.ReplaceAllString(block, "at TIME after")
			if !strings.HasPrefix(got, leakyStats) {
				t.Errorf("statistics:\n%s\nwant them to begin with:\n%s", got, leakyStats)
			}
			p := prog("leaky")
			for _, want := range []string{
				"\nCall sites by allocations (10 of 20 call sites):\n10000 allocations (99.8%), 639990 bytes, 1 temporary, peak 4128 bytes:\n          #00  pc ",
				"  " + p + " (churn+",
				"\nCall sites by peak live bytes, each its own largest (10 of 20 call sites):\npeak 5000 bytes, 1 allocations, 5000 bytes in total, 0 live at the end:\n          #00  pc ",
				"peak 4096 bytes, 1 allocations, 4096 bytes in total, 4096 live at the end:\n          #00  pc ",
				"  " + p + " (leak_pvalloc+",
			} {
				if !strings.Contains(block, want) {
					t.Errorf("call sites lack %q:\n%s", want, block)
				}
			}
			recs, _ := filepath.Glob(dir + "/rec.*")
			if len(recs) != 1 {
				t.Fatalf("record files %v", recs)
			}
			r = runMdtrace(t, "stats", recs[0])
			want := "Statistics of " + recs[0] + ":\n" + leakyStats +
				"\nCall sites: not in a record_allocs file, which has no backtraces (mdtrace --stats -o backtrace has them)\n"
			if got := peakTime.ReplaceAllString(r.stdout, "at TIME after"); r.code != 0 || got != want {
				t.Errorf("mdtrace stats: exit %d:\n%s%s\nwant:\n%s", r.code, r.stdout, r.stderr, want)
			}
		})
	}
}

// TestStatsRealProgram: Debian's python3 started by sh, and forker, whose
// child starts with its parent's block, under --stats without backtraces:
// each process's live heap at its end, added up from every call (and,
// for a fork child, its parent's heap at the fork), is the one the live
// table holds at its exit; the call sites are said to be missing.
func TestStatsRealProgram(t *testing.T) {
	needRoot(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	for _, args := range [][]string{
		{"/bin/sh", "-c", "/usr/bin/python3 -c 'x = [bytearray(i) for i in range(3000)]'; /bin/true"},
		{prog("forker")},
	} {
		r := runMdtrace(t, append([]string{"--stats", "-o", "leak_track", "--"}, args...)...)
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		live := map[string]string{}
		head := regexp.MustCompile(`^(\d+) \([^\n]*\):( no allocator call was seen)?\n`)
		liveLine := regexp.MustCompile(`\nLive at the end: (\d+) bytes in (\d+) blocks\n`)
		for _, chunk := range strings.Split(r.stderr, "mdtrace: statistics of process ")[1:] {
			h := head.FindStringSubmatch(chunk)
			if h == nil {
				t.Fatalf("statistics without their process: %q", chunk)
			}
			if h[2] != "" {
				live[h[1]] = "0 in 0"
			} else if m := liveLine.FindStringSubmatch(chunk); m != nil {
				live[h[1]] = m[1] + " in " + m[2]
			}
		}
		leaked := map[string]string{}
		for _, m := range regexp.MustCompile(`\n[-0-9:. ]+ (\d+) +\d+ E malloc_debug: mdtrace: (\d+) bytes in (\d+) leaked allocations\n`).FindAllStringSubmatch(r.stderr, -1) {
			leaked[m[1]] = m[2] + " in " + m[3]
		}
		if len(live) < 2 || len(live) != len(leaked) {
			t.Errorf("%q: live at the end %v, leaked %v:\n%s", args, live, leaked, r.stderr)
		}
		for pid, l := range live {
			if leaked[pid] != l {
				t.Errorf("%q: process %s: live at the end %s, leaked %s", args, pid, l, leaked[pid])
			}
		}
		if !strings.Contains(r.stderr, "\nCall sites: no backtraces were taken (the backtrace option gives them)\n") {
			t.Errorf("%q: no word of the call sites:\n%s", args, r.stderr)
		}
		if args[0] != "/bin/sh" && !strings.Contains(r.stderr, "\nInherited at fork: 1111 bytes in 1 blocks, the parent's, live from the start\n") {
			t.Errorf("forker's child inherits nothing:\n%s", r.stderr)
		}
	}
}

// TestStatsBadInput: mdtrace stats on what is not a record file says
// which line is wrong and exits 1; bad arguments exit 2.
func TestStatsBadInput(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats", file("garbage.txt", "100: malloc 0x10 8\nthis is not a record\n")}, 1, "garbage.txt: record_allocs: line 2: "},
		{[]string{"stats", file("empty.txt", "")}, 1, "empty.txt: no records\n"},
		{[]string{"stats", filepath.Join(dir, "missing.txt")}, 1, "no such file or directory\n"},
		{[]string{"stats", dir}, 1, "not a regular file\n"},
		{[]string{"stats"}, 2, "mdtrace: stats reads one record_allocs file\nusage: mdtrace stats"},
	} {
		r := runMdtrace(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}
