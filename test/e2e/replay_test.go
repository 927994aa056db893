//go:build linux

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/output"
)

// replayExpect is what mdtrace replay must report for a record_allocs
// file, worked out here from the file itself: the calls by kind, the
// threads and the peak of live bytes, with the sizes recorded.
func replayExpect(t *testing.T, path string) (counts string, mallocs, threads int, peak uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := output.ReadRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	n := map[output.RecordType]int{}
	live := map[uint64]uint64{}
	tids := map[int32]bool{}
	var bytes uint64
	for _, r := range recs {
		if !tids[r.TID] {
			tids[r.TID] = true
			threads++
		}
		if r.Type == output.RecordThreadDone {
			// A TID seen again after its end is a thread of its own.
			delete(tids, r.TID)
		}
		failed := r.Ptr == 0 && (r.Type == output.RecordMalloc || r.Type == output.RecordCalloc ||
			r.Type == output.RecordMemalign || r.Type == output.RecordRealloc && r.Size != 0)
		if failed {
			// A call that returned NULL is not replayed.
			continue
		}
		switch r.Type {
		case output.RecordFree:
			size, ok := live[r.Ptr]
			if !ok {
				continue
			}
			bytes -= size
			delete(live, r.Ptr)
		case output.RecordRealloc:
			if r.Arg != 0 {
				bytes -= live[r.Arg]
				delete(live, r.Arg)
			}
		}
		size := r.Size
		if r.Type == output.RecordCalloc {
			size *= r.Arg
		}
		if r.Type != output.RecordFree && r.Type != output.RecordThreadDone && r.Ptr != 0 {
			// An address allocated again without a free in between
			// replaces the older block in the count.
			bytes -= live[r.Ptr]
			bytes += size
			live[r.Ptr] = size
			peak = max(peak, bytes)
		}
		n[r.Type]++
	}
	var b strings.Builder
	for k := output.RecordMalloc; k <= output.RecordThreadDone; k++ {
		fmt.Fprintf(&b, "  %-12s %d\n", k.String()+":", n[k])
	}
	return b.String(), n[output.RecordMalloc], threads, peak
}

// replayTimesRe matches the lines of a replay's report that vary from run
// to run: the time and the RSS.
var replayTimesRe = regexp.MustCompile(`(?m)^Allocator calls: (\d+) in \S+, [0-9.]+ ns a call \(wall time \S+\)\nPeak live bytes \(recorded sizes\): (\d+)\nPeak RSS: (\d+) kB \((\d+) kB before the replay\)\n`)

// TestReplay records a run of testdata/record with four threads for real,
// and replays the file with glibc's allocator and with jemalloc: the calls
// by kind, the threads and the peak of live bytes are the file's.
func TestReplay(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	pid, _ := launchOK(t, dir, "-o", "record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("record"), "stress", "2500")
	path := fmt.Sprintf("%s/rec.%d", dir, pid)
	counts, mallocs, threads, peak := replayExpect(t, path)
	if mallocs < 4*2500 || threads != 5 {
		t.Fatalf("the trace of record stress 2500 has %d threads and these calls:\n%s", threads, counts)
	}
	for _, alloc := range []struct{ name, lib, shown string }{
		{"glibc", "", "/lib/x86_64-linux-gnu/libc.so.6"},
		{"jemalloc", jemalloc, jemalloc},
	} {
		t.Run(alloc.name, func(t *testing.T) {
			args := []string{"replay", path}
			if alloc.lib != "" {
				if _, err := os.Stat(alloc.lib); err != nil {
					t.Skipf("%s is not installed (Debian's libjemalloc2)", alloc.lib)
				}
				args = []string{"replay", "--allocator", alloc.lib, path}
			}
			r := runMdtrace(t, args...)
			if r.code != 0 {
				t.Fatalf("mdtrace %v: exit status %d\n%s%s", args, r.code, r.stdout, r.stderr)
			}
			head := fmt.Sprintf("Replay of %s: %d threads, allocator %s\n%s", path, threads, alloc.shown, counts)
			if !strings.HasPrefix(r.stdout, head) {
				t.Fatalf("mdtrace %v:\n%s\nwant it to begin with:\n%s", args, r.stdout, head)
			}
			m := replayTimesRe.FindStringSubmatch(r.stdout[len(head):])
			if m == nil {
				t.Fatalf("mdtrace %v: no times, peak and RSS after the counts:\n%s", args, r.stdout)
			}
			if m[2] != fmt.Sprint(peak) {
				t.Errorf("peak live bytes %s, want %d", m[2], peak)
			}
			if m[3] < m[4] || m[3] == "0" {
				t.Errorf("peak RSS %s kB, %s kB before", m[3], m[4])
			}
		})
	}
}

// replayOld is a record_allocs file in the format Android wrote before
// November 2022, without times. Thread 101 frees what 100 allocated and
// 100 frees, after 101's end, what 101 allocated; 0xdead is never
// allocated. The live bytes peak at 500: 100 + 200 after the memalign,
// then 100 freed and the 100 of the calloc grown to 300.
const replayOld = `100: malloc 0xa000 100
100: calloc 0xb000 4 25
101: memalign 0xc000 64 200
101: free 0xa000
100: realloc 0xd000 0xb000 300
100: free 0xdead
101: thread_done 0x0
100: realloc 0x0 0xd000 0
100: free 0xc000
`

func TestReplayOldFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.txt")
	if err := os.WriteFile(path, []byte(replayOld), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runMdtrace(t, "replay", path)
	if r.code != 0 {
		t.Fatalf("exit status %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := "Replay of " + path + ": 2 threads, allocator /lib/x86_64-linux-gnu/libc.so.6\n" +
		"  malloc:      1\n  calloc:      1\n  memalign:    1\n  realloc:     2\n  free:        2\n  thread_done: 1\n" +
		"Allocator calls: 7 in X\n" +
		"Peak live bytes (recorded sizes): 500\n" +
		"Peak RSS: X\n" +
		"Note: 1 frees of a pointer the trace does not allocate: not replayed\n"
	got := regexp.MustCompile(`(?m)^(Allocator calls: 7 in|Peak RSS:) .*$`).ReplaceAllString(r.stdout, "$1 X")
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestReplayErrors: a malformed line is named by its number, a missing
// file or a library that is no allocator are errors, all with a non-zero
// exit status.
func TestReplayErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("100: malloc 0xa000 100\n100: free 0xa000\ngarbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.txt")
	if err := os.WriteFile(good, []byte(replayOld), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.txt")
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"garbage", []string{"replay", bad}, 1, "mdtrace: " + bad + ": record_allocs: line 3: Failed to process line: garbage\n"},
		{"missing", []string{"replay", missing}, 1, "mdtrace: open " + missing + ": no such file or directory\n"},
		{"empty", []string{"replay", empty}, 1, "mdtrace: " + empty + ": no records\n"},
		{"no file", []string{"replay"}, 2, "mdtrace: replay reads one record_allocs file\n"},
		{"not a library", []string{"replay", "--allocator", good, good}, 2, "mdtrace: --allocator: reading " + good + ": bad magic number '[49 48 48 58]' in record at byte 0x0\n"},
	}
	if _, err := os.Stat(libz); err == nil {
		cases = append(cases, struct {
			name   string
			args   []string
			code   int
			stderr string
		}{"not an allocator", []string{"replay", "--allocator", libz, good}, 1,
			"mdtrace: --allocator " + libz + ": malloc in the replay was /lib/x86_64-linux-gnu/libc.so.6's: the library does not replace malloc\n"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runMdtrace(t, tc.args...)
			if r.code != tc.code || r.stdout != "" {
				t.Fatalf("mdtrace %v: exit status %d, want %d; stdout:\n%s\nstderr:\n%s", tc.args, r.code, tc.code, r.stdout, r.stderr)
			}
			got := r.stderr
			if tc.code == 2 {
				// A usage error: its line, then the usage.
				got, _, _ = strings.Cut(got, "usage:")
			}
			if got != tc.stderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, tc.stderr)
			}
			if tc.code == 2 && !strings.Contains(r.stderr, "usage: mdtrace replay") {
				t.Errorf("no usage:\n%s", r.stderr)
			}
		})
	}
}

// TestReplayNoReplayer: a copy of mdtrace with no mdreplay next to it nor
// in ../lib/mdtrace says where it looked.
func TestReplayNoReplayer(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "mdtrace")
	if err := os.Mkdir(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(mdtraceBin, bin); err != nil {
		t.Fatal(err)
	}
	records := filepath.Join(dir, "records.txt")
	if err := os.WriteFile(records, []byte(replayOld), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "replay", records).CombinedOutput()
	want := fmt.Sprintf("mdtrace: no mdreplay next to mdtrace or where make install puts it (%s/bin/mdreplay, %s/lib/mdtrace/mdreplay)\n", dir, dir)
	if code := exitCode(err); code != 1 || string(out) != want {
		t.Errorf("exit status %d, output:\n%s\nwant 1 and:\n%s", code, out, want)
	}
}

// exitCode is the exit status of a command that ran, from its error.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// libz is a shared library that defines no malloc.
const libz = "/usr/lib/x86_64-linux-gnu/libz.so.1"

// TestReplayProgress: replaying a long trace tells a person at a terminal
// how far the reading is, once it has read 131,072 lines (the length of
// the file is not known in lines), then how many calls it replays; without a
// terminal, nothing on standard error. The calls are staged in a file no
// name leads to: nothing is left in the temporary directory.
func TestReplayProgress(t *testing.T) {
	needRoot(t)
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script (util-linux) to give mdtrace a terminal")
	}
	dir := t.TempDir()
	// 70,000 malloc/free pairs of two threads, in a device's format.
	var b strings.Builder
	for i := 0; i < 70000; i++ {
		tid := 100 + i%2
		fmt.Fprintf(&b, "%d: malloc 0x%x %d\n%d: free 0x%x\n", tid, 0x10000+16*i, 1+i%500, tid, 0x10000+16*i)
	}
	path := filepath.Join(dir, "records.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o700)
	cmd := exec.Command(script, "-qec", fmt.Sprintf("%s replay %s", mdtraceBin, path), "/dev/null")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	text := strings.ReplaceAll(string(out), "\r\x1b[K", "\n")
	for _, want := range []string{
		"mdtrace: " + path + ": reading: 131072 lines, 93% of the file\n",
		"mdtrace: " + path + ": 140000 lines read, 140000 calls of 2 threads to replay\r\n",
		"Replay of " + path + ": 2 threads, allocator ",
		"  malloc:      70000\r\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, text)
		}
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
	r := runMdtrace(t, "replay", path)
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "  free:        70000\n") {
		t.Errorf("without a terminal: exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
