package dumps

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/stacks"
)

// update rewrites the golden files with the current output, for
// confirming a deliberate format change after review of the diff.
var update = flag.Bool("update", false, "rewrite the golden files in ../testdata/golden")

// checkGolden compares got with the golden file name, or rewrites the file
// under -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("../testdata/golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

// readDump reads a heap dump of ../testdata/dumps: dumps mdtrace wrote
// with backtrace_full, whose bt_info lines name every frame, so that they
// read the same on any machine.
func readDump(t *testing.T, name string) *Dump {
	t.Helper()
	d, err := Read(filepath.Join("../testdata/dumps", name), stacks.NewSymbolizer())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestHTMLGolden: the flame graph page of cppleak's dump, whose C++ names
// (geo::Arena<char>::raw, std::nothrow_t const&) must come out escaped.
func TestHTMLGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHTML(&b, readDump(t, "cppleak_full.txt")); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report_cppleak.html", b.Bytes())
	page := b.String()
	for _, want := range []string{
		"<title>geo::Arena&lt;char&gt;::raw(unsigned long)\nin /home/user/mdtrace/testdata/cppleak\n777 bytes in 1 allocations (1.04%)</title>",
		"<title>operator new[](unsigned long, std::nothrow_t const&amp;)\nin /home/user/mdtrace/bin/libmdshim.so\n333 bytes in 1 allocations (0.45%)</title>",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	checkSelfContained(t, page)
}

// checkSelfContained fails the test if page refers to anything outside
// itself: a URL, or a file to load.
func checkSelfContained(t *testing.T, page string) {
	t.Helper()
	if m := regexp.MustCompile(`(?i)(https?:|ftp:|file:|//[a-z]|\bsrc\s*=|\bhref\s*=|@import|url\()`).FindString(page); m != "" {
		t.Errorf("the page refers to something outside it: %q", m)
	}
	// Only the dump's text may hold < > &, and it must come escaped: the
	// page's own tags are the only ones.
	tags := regexp.MustCompile(`</?([a-zA-Z]+)`).FindAllStringSubmatch(page, -1)
	known := map[string]bool{"html": true, "head": true, "meta": true, "title": true, "style": true, "body": true, "p": true, "br": true,
		"input": true, "button": true, "span": true, "svg": true, "g": true, "rect": true, "text": true, "script": true}
	for _, m := range tags {
		if !known[m[1]] {
			t.Errorf("the page has a tag <%s>: unescaped text from the dump?", m[1])
		}
	}
}

// TestHTMLNarrowAndEmpty: frames too narrow to draw are counted on the
// page, and a dump with no live bytes says so instead of drawing an empty
// graph.
func TestHTMLNarrowAndEmpty(t *testing.T) {
	d := &Dump{Path: "x<y>.txt"}
	d.ParsedHeapDump = readDump(t, "leaky_full.txt").ParsedHeapDump
	d.Sites = []Site{
		{Frames: []stacks.Frame{{Func: "big", MapName: "/a"}}, Bytes: 1 << 20, Allocs: 1},
		{Frames: []stacks.Frame{{Func: "tiny", MapName: "/a"}, {Func: "caller", MapName: "/a"}}, Bytes: 1, Allocs: 1},
	}
	d.Bytes, d.Allocs = 1<<20+1, 2
	var b bytes.Buffer
	if err := WriteHTML(&b, d); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if want := " 2 frames of less than 1/12000 of the live bytes each are not drawn; their bytes count in their callers."; !strings.Contains(page, want) || strings.Contains(page, "tiny") {
		t.Errorf("want %q, and no frame for tiny:\n%s", want, page)
	}
	if !strings.Contains(page, "<title>mdtrace: x&lt;y&gt;.txt</title>") {
		t.Errorf("the dump's name is not escaped:\n%s", page)
	}
	checkSelfContained(t, page)
	d.Sites = []Site{{Frames: []stacks.Frame{{Func: "zero"}}, Allocs: 1}}
	d.Bytes, d.Allocs = 0, 1
	b.Reset()
	if err := WriteHTML(&b, d); err != nil {
		t.Fatal(err)
	}
	if page := b.String(); !strings.Contains(page, "<p>The dump holds no live bytes: there is no flame graph to draw.</p>") || strings.Contains(page, "<svg") {
		t.Errorf("empty dump:\n%s", page)
	}
}

// TestTreeGolden: the text report as a tree, by caller and by callee.
func TestTreeGolden(t *testing.T) {
	for _, tc := range []struct {
		dump, golden string
		callee       bool
		min          float64
	}{
		{"leaky_full.txt", "report_leaky_caller.txt", false, 1},
		{"leaky_full.txt", "report_leaky_callee.txt", true, 6.25},
		{"cppleak_full.txt", "report_cppleak_callee.txt", true, 0},
	} {
		var b bytes.Buffer
		if err := WriteTree(&b, readDump(t, tc.dump), tc.callee, tc.min); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, tc.golden, b.Bytes())
	}
}
