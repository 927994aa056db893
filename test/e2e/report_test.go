//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// leakyDump runs testdata/leaky under mdtrace and returns its heap dump
// at exit.
func leakyDump(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	r := runMdtrace(t, "-o", "backtrace backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h", "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	m, _ := filepath.Glob(dir + "/h.*.exit.txt")
	if len(m) != 1 {
		t.Fatalf("dumps %v", m)
	}
	return m[0]
}

var pcRe = regexp.MustCompile(`pc [0-9a-f]{16}`)

// TestReport: "mdtrace report" reads a heap dump mdtrace wrote and gives
// its totals and its allocations by backtrace, named, as text, folded
// stacks and a pprof profile.
func TestReport(t *testing.T) {
	needRoot(t)
	dump := leakyDump(t)
	r := runMdtrace(t, "report", dump)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	out := pcRe.ReplaceAllString(r.stdout, "pc PC")
	for _, want := range []string{
		dump + ": Android Native Heap Dump v1.2, 13 records, backtrace_size 16\nTotal: 16194 bytes in 13 allocations, 13 backtraces\n\n",
		"Allocations by backtrace, the most bytes first:\n4096 bytes in 1 allocations (25.3%):\n          #00  pc PC  " + prog("leaky") + " (leak_pvalloc+13)\n          #01  pc PC  " + prog("leaky") + " (main+64)\n",
		"\n        4096  25.3%         4096  25.3%  leak_pvalloc\n",
		"           0   0.0%        15181  93.7%  main\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	r = runMdtrace(t, "report", "--format", "folded", dump)
	if want := "_start;__libc_start_main;__libc_start_call_main;main;leak_pvalloc 4096\n"; r.code != 0 || !strings.HasPrefix(r.stdout, want) || strings.Count(r.stdout, "\n") != 13 {
		t.Errorf("folded: exit %d:\n%s\nwant 13 lines, the first %q", r.code, r.stdout, want)
	}
	pb := filepath.Join(t.TempDir(), "p.pb.gz")
	if r = runMdtrace(t, "report", "--format", "pprof", "-o", pb, dump); r.code != 0 {
		t.Fatalf("pprof: exit %d: %s", r.code, r.stderr)
	}
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var objects, space int64
	for _, s := range p.Sample {
		objects += s.Value[0]
		space += s.Value[1]
	}
	if objects != 13 || space != 16194 || p.SampleType[1].Type != "inuse_space" || p.Sample[0].Location[0].Line[0].Function.Name != "leak_pvalloc" {
		t.Errorf("profile: %d objects, %d bytes, types %v, first function %q", objects, space, p.SampleType, p.Sample[0].Location[0].Line[0].Function.Name)
	}
	if _, err := exec.LookPath("go"); err == nil {
		out, err := exec.Command("go", "tool", "pprof", "-top", pb).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "4096B 25.29% 25.29%      4096B 25.29%  leak_pvalloc") {
			t.Errorf("go tool pprof -top: %v\n%s", err, out)
		}
	}
}

// TestReportHTMLAndTree: the flame graph page of a dump mdtrace wrote
// names each frame with its function, file, bytes, allocations and share,
// loads nothing from outside, and is written private; the tree by callee
// puts each allocating function first, its callers indented below it.
func TestReportHTMLAndTree(t *testing.T) {
	needRoot(t)
	dump := leakyDump(t)
	page := filepath.Join(t.TempDir(), "flame.html")
	r := runMdtrace(t, "report", "--format", "html", "-o", page, dump)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("exit status %d; stdout %q, stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if fi, err := os.Stat(page); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the page: %v, mode %v; want 0600", err, fi.Mode())
	}
	text := readFile(t, page)
	for _, want := range []string{
		"<title>leak_pvalloc\nin " + prog("leaky") + "\n4096 bytes in 1 allocations (25.29%)</title>",
		"<title>main\nin " + prog("leaky") + "\n15181 bytes in 12 allocations (93.74%)</title>",
		"<title>all\n16194 bytes in 13 allocations (100.00%)</title>",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`(?i)(https?:|file:|\bsrc\s*=|\bhref\s*=|url\()`).FindString(text); m != "" {
		t.Errorf("the page refers to something outside it: %q", m)
	}
	if n := strings.Count(text, `<g class="f"`); n != 18 {
		t.Errorf("%d frames drawn; want 18: all, _start, __libc_start_main, __libc_start_call_main, main, leak_in_constructor and main's 12 leak_ functions", n)
	}
	r = runMdtrace(t, "report", "--tree", "callee", "--min-percent", "6.25", dump)
	want := "       16194  100.0%        13  all\n" +
		"        4096   25.3%         1    leak_pvalloc  [" + prog("leaky") + "]\n" +
		"        4096   25.3%         1      main  [" + prog("leaky") + "]\n"
	if r.code != 0 || !strings.Contains(r.stdout, want) || !strings.HasSuffix(r.stdout, "       10061   62.1%        10    [10 more, each under 6.25%]\n") {
		t.Errorf("--tree callee: exit %d, want %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}

// TestReportDeviceDump: a dump taken elsewhere (its files at other paths,
// as a device's /system/...) is symbolized from copies of its files under
// --symbols DIR, as native_heapdump_viewer.py does; without them its frames
// keep their files and offsets. A v1.0 dump counts each record once.
func TestReportDeviceDump(t *testing.T) {
	needRoot(t)
	dump := readFile(t, leakyDump(t))
	dir := t.TempDir()
	dump = strings.ReplaceAll(dump, prog("leaky"), "/system/bin/leaky")
	dump = regexp.MustCompile(`/usr/lib/x86_64-linux-gnu/libc\.so\.6`).ReplaceAllString(dump, "/system/lib64/libc.so")
	device := filepath.Join(dir, "device.txt")
	os.WriteFile(device, []byte(dump), 0o644)
	syms := filepath.Join(dir, "symbols")
	for from, to := range map[string]string{prog("leaky"): "system/bin/leaky", "/usr/lib/x86_64-linux-gnu/libc.so.6": "system/lib64/libc.so"} {
		os.MkdirAll(filepath.Dir(filepath.Join(syms, to)), 0o755)
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(syms, to), data, 0o644)
	}
	r := runMdtrace(t, "report", "--symbols", syms, device)
	if want := "/system/bin/leaky (leak_pvalloc+13)\n"; r.code != 0 || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "/system/lib64/libc.so (__libc_start_call_main+") {
		t.Errorf("--symbols: exit %d, want %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	r = runMdtrace(t, "report", device)
	if r.code != 0 || strings.Contains(r.stdout, "leak_pvalloc") || !strings.Contains(r.stdout, "/system/bin/leaky\n") {
		t.Errorf("without --symbols: exit %d:\n%s", r.code, r.stdout)
	}
	// v1.0: no fingerprint, and num fields that do not add up.
	v10 := "Android Native Heap Dump v1.0\n\nTotal memory: 999\nAllocation records: 2\nBacktrace size: 4\n\n" +
		"z 0  sz      100  num    7  bt 1000 2000\nz 1  sz      200  num    3  bt 1000\nMAPS\nEND\n"
	old := filepath.Join(dir, "v10.txt")
	os.WriteFile(old, []byte(v10), 0o644)
	r = runMdtrace(t, "report", old)
	if want := "Total: 300 bytes in 2 allocations, 2 backtraces (the zygote's: 200 bytes in 1 allocations)\n"; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("v1.0: exit %d, want %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}

// TestReportBadInput: malformed dumps and bad arguments get a clear error
// and a non-zero exit.
func TestReportBadInput(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	head := "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'x'\n\nTotal memory: 100\nAllocation records: 1\nBacktrace size: 4\n\n"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"report", file("v9.txt", "Android Native Heap Dump v9.9\n")}, 1, "v9.txt: heap dump: line 1: unsupported heap dump version \"v9.9\"\n"},
		{[]string{"report", file("trunc.txt", head+"z 0  sz 100  num 1  bt 1000\nMAPS\n")}, 1, "trunc.txt: heap dump: line 11: unexpected end of file, missing END\n"},
		{[]string{"report", file("garbage.txt", head+"this is not a record\nMAPS\nEND\n")}, 1, "garbage.txt: heap dump: line 9: bad allocation record \"this is not a record\": want z Z sz SIZE num NUM bt FRAMES\n"},
		{[]string{"report", filepath.Join(dir, "missing.txt")}, 1, "open " + dir + "/missing.txt: no such file or directory\n"},
		{[]string{"report", dir}, 1, "not a regular file"},
		{[]string{"report"}, 2, "mdtrace: report reads one heap dump\nusage: mdtrace report"},
		{[]string{"report", "--format", "svg", "x"}, 2, "mdtrace: unknown --format \"svg\": text, folded, pprof or html\n"},
		{[]string{"report", "--tree", "up", "x"}, 2, "mdtrace: unknown --tree \"up\": caller or callee\n"},
		{[]string{"report", "--tree", "caller", "--format", "html", "x"}, 2, "mdtrace: --tree is a text report's: not with --format html\n"},
		{[]string{"report", "--min-percent", "2", "x"}, 2, "mdtrace: --min-percent goes with --tree\n"},
		{[]string{"report", "--tree", "callee", "--min-percent", "101", "x"}, 2, "mdtrace: --min-percent 101: not between 0 and 100\n"},
		{[]string{"report", "--format", "html", file("trunc2.txt", head+"z 0  sz 100  num 1  bt 1000\n")}, 1, "trunc2.txt: heap dump: line 10: unexpected end of file, missing MAPS\n"},
		{[]string{"diff", "x"}, 2, "mdtrace: diff reads two heap dumps, the older first\n"},
	} {
		r := runMdtrace(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

// TestDiff: two heap dumps of a process whose blocks grow, taken on signal
// 47 a moment apart: diff names the growing site first, with the bytes it
// grew by.
func TestDiff(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "-o", "backtrace backtrace_dump_prefix="+dir+"/h", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("grower"), "12", "200", "100")
	waitFile(t, dir+"/ready")
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	dump := fmt.Sprintf("%s/h.%s.txt", dir, pid)
	take := func(to string) {
		before, _ := os.Stat(dump)
		m.cmd.Process.Signal(syscall.Signal(47))
		for i := 0; i < 400; i++ {
			if fi, err := os.Stat(dump); err == nil && (before == nil || !os.SameFile(fi, before)) {
				data, err := os.ReadFile(dump)
				if err == nil && bytes.HasSuffix(data, []byte("END\n")) {
					os.WriteFile(to, data, 0o644)
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("no heap dump at %s", dump)
	}
	time.Sleep(250 * time.Millisecond)
	take(dir + "/old.txt")
	time.Sleep(400 * time.Millisecond)
	take(dir + "/new.txt")
	m.wait(t)
	r := runMdtrace(t, "diff", dir+"/old.txt", dir+"/new.txt")
	lines := strings.Split(r.stdout, "\n")
	growth := regexp.MustCompile(`^\+([0-9]+)00 bytes, \+([0-9]+) allocations \(([0-9]+) -> ([0-9]+) bytes\):$`)
	if r.code != 0 || len(lines) < 4 || !growth.MatchString(lines[2]) || !strings.Contains(lines[3], "(grow_batch+") {
		t.Errorf("diff: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
}
