//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
)

// heapDumpFunctions symbolizes the first frame of each record of a heap
// dump with the dump's own MAPS section, as a developer would offline.
func heapDumpFunctions(t *testing.T, d *output.ParsedHeapDump) []string {
	t.Helper()
	maps, err := stacks.ParseMaps([]byte(d.Maps))
	if err != nil {
		t.Fatalf("the dump's maps: %v", err)
	}
	sym := stacks.NewSymbolizer()
	var out []string
	for _, r := range d.Records {
		if len(r.Frames) == 0 {
			out = append(out, "")
			continue
		}
		fr := sym.Symbolize(0, maps, r.Frames[:1])
		out = append(out, fr[0].Func)
	}
	return out
}

var dumpRecordRe = regexp.MustCompile(`^z 0  sz +(\d+)  num    1  bt( [0-9a-f]+)+$`)

func TestHeapDumpOnExit(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	r := runMdtrace(t, "-o", "backtrace backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/h", "--ready-file", dir+"/ready", "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	path := fmt.Sprintf("%s/h.%s.exit.txt", dir, pid)
	data := readFile(t, path)
	checkHeapDump(t, data, prog("leaky"))
	// The log names the file as Android does.
	if !strings.Contains(r.stderr, "E malloc_debug: Dumping to file: "+path+"\n") {
		t.Errorf("no 'Dumping to file' line in:\n%s", r.stderr)
	}
}

// checkHeapDump checks a heap dump of leaky byte for byte, with frames and
// maps normalized.
func checkHeapDump(t *testing.T, data, progPath string) {
	t.Helper()
	lines := strings.Split(data, "\n")
	head := strings.Join(lines[:8], "\n")
	wantHead := fmt.Sprintf("Android Native Heap Dump v1.2\n\nBuild fingerprint: '%s'\n\nTotal memory: %d\nAllocation records: 13\nBacktrace size: 16\n\n",
		output.BuildFingerprint(), 4096+1024+1013+1012+1011+1009+1008+1006+1005+1004+1003+1002+1001)
	if head != strings.TrimSuffix(wantHead, "\n") {
		t.Errorf("header:\n%s\nwant:\n%s", head, wantHead)
	}
	var sizes []string
	for _, l := range lines[8:21] {
		m := dumpRecordRe.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("record line %q", l)
			continue
		}
		sizes = append(sizes, m[1])
	}
	if got := strings.Join(sizes, " "); got != "4096 1024 1013 1012 1011 1009 1008 1006 1005 1004 1003 1002 1001" {
		t.Errorf("record sizes %s", got)
	}
	if lines[21] != "MAPS" || lines[len(lines)-2] != "END" || lines[len(lines)-1] != "" {
		t.Errorf("maps section: %q ... %q", lines[21], lines[len(lines)-2:])
	}
	if !strings.Contains(data, " "+progPath+"\n") {
		t.Errorf("the maps do not list %s", progPath)
	}
	d, err := output.ParseHeapDump(strings.NewReader(data))
	if err != nil {
		t.Fatalf("ParseHeapDump: %v", err)
	}
	got := strings.Join(heapDumpFunctions(t, d), " ")
	want := "leak_pvalloc leak_aligned_alloc leak_in_constructor leak_failed_realloc leak_failed_reallocarray leak_valloc leak_posix_memalign leak_memalign leak_reallocarray leak_realloc_grow leak_realloc_new leak_calloc leak_malloc"
	if got != want {
		t.Errorf("first frames:\n got %s\nwant %s", got, want)
	}
}

func TestSignal47WritesHeapDump(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "-o", "backtrace backtrace_dump_prefix="+dir+"/h", "--ready-file", dir+"/ready", "--", prog("leaky"), "hold")
	m.expectLine(t, "leaky: done")
	waitFile(t, dir+"/ready")
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	m.cmd.Process.Signal(syscall.Signal(47))
	path := fmt.Sprintf("%s/h.%s.txt", dir, pid)
	waitFile(t, path)
	checkHeapDump(t, readFile(t, path), prog("leaky"))
	m.stdin.Close()
	if code := m.wait(t); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	if _, err := os.Stat(fmt.Sprintf("%s/h.%s.exit.txt", dir, pid)); err == nil {
		t.Error("an exit dump was written without backtrace_dump_on_exit")
	}
}

// sourceLine returns the number of the line of a testdata source file
// that holds text.
func sourceLine(t *testing.T, file, text string) int {
	t.Helper()
	for i, l := range strings.Split(readFile(t, filepath.Join(testdataDir, file)), "\n") {
		if strings.Contains(l, text) {
			return i + 1
		}
	}
	t.Fatalf("%s has no %q", file, text)
	return 0
}

func TestFoldedStacksWithLines(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	r := runMdtrace(t, "--backtrace", "--folded", dir+"/folded", "--log", "/dev/null", "--", prog("leaky"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	folded := readFile(t, dir+"/folded")
	want := fmt.Sprintf(";main (leaky.c:%d);leak_malloc (leaky.c:%d) 1001\n",
		sourceLine(t, "leaky.c", "\tleak_malloc();"), sourceLine(t, "leaky.c", "malloc(1001)"))
	if !strings.Contains(folded, want) {
		t.Errorf("no line ending in %q:\n%s", want, folded)
	}
	if n := strings.Count(folded, "\n"); n != 13 {
		t.Errorf("%d folded stacks, want 13:\n%s", n, folded)
	}
}

// TestDumpProgress: a heap dump of many records, written at exit, tells a
// person at a terminal how far it is, on a line redrawn in place, and
// where it wrote, as a long leak report does; so do report and diff
// reading it, and they say where they wrote. Without a terminal, none of
// them says anything on standard error.
func TestDumpProgress(t *testing.T) {
	needRoot(t)
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script (util-linux) to give mdtrace a terminal")
	}
	dir := t.TempDir()
	onTerminal := func(command string) string {
		t.Helper()
		out, err := exec.Command(script, "-qec", command, "/dev/null").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", command, err, out)
		}
		return strings.ReplaceAll(string(out), "\r\x1b[K", "\n")
	}
	// 140,000 blocks live at exit, each its own record, from 137 call
	// paths (32 frames tell them apart); calloc's array of them is one
	// more.
	text := onTerminal(fmt.Sprintf("%s -o 'backtrace=32 backtrace_dump_on_exit backtrace_dump_prefix=%s/h' -- %s 140000", mdtraceBin, dir, prog("manysites")))
	dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
	if len(dumps) != 1 {
		t.Fatalf("dumps %v", dumps)
	}
	dump := dumps[0]
	for _, want := range []string{
		": writing the heap dump: 65536 of 140001 records\n",
		": writing the heap dump: 131072 of 140001 records\n",
		": heap dump of 140001 records written to " + dump + "\r\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, text)
		}
	}
	out := filepath.Join(dir, "report.txt")
	text = onTerminal(fmt.Sprintf("%s report -o %s %s", mdtraceBin, out, dump))
	for _, want := range []string{
		"mdtrace: " + dump + ": reading: 65536 of 140001 records\n",
		"mdtrace: " + dump + ": reading: 131072 of 140001 records\n",
		"mdtrace: " + dump + ": report of 140001 records, 138 backtraces written to " + out + "\r\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report's terminal output lacks %q:\n%q", want, text)
		}
	}
	if report := readFile(t, out); !strings.Contains(report, "Total: 72764016 bytes in 140001 allocations, 138 backtraces\n") {
		t.Errorf("report:\n%.400s", report)
	}
	text = onTerminal(fmt.Sprintf("%s diff -o %s/diff.txt %s %s", mdtraceBin, dir, dump, dump))
	for _, want := range []string{
		"mdtrace: " + dump + ": read 140001 records, 138 backtraces\r\n",
		"mdtrace: diff of " + dump + " and " + dump + " written to " + dir + "/diff.txt\r\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("diff's terminal output lacks %q:\n%q", want, text)
		}
	}
	r := runMdtrace(t, "-o", "backtrace backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/quiet", "--", prog("manysites"), "140000")
	if r.code != 0 || strings.Contains(r.stderr, "heap dump of") || strings.Contains(r.stderr, "\r") {
		t.Errorf("without a terminal: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r = runMdtrace(t, "report", "-o", out, dump); r.code != 0 || r.stderr != "" {
		t.Errorf("report without a terminal: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
