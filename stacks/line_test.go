package stacks

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sourceLine returns the 1-based number of the first line of the file at
// path that contains text.
func sourceLine(t *testing.T, path, text string) int {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		if strings.Contains(sc.Text(), text) {
			return n
		}
	}
	t.Fatalf("%s has no line with %q", path, text)
	return 0
}

// checkLines checks Line for the first instruction of local_func and
// exported_func, and compares Line with addr2line over the first bytes of
// local_func when addr2line is installed.
func checkLines(t *testing.T, s *Symbolizer, pid int, maps *Maps, addrs map[string]uint64, full string) {
	t.Helper()
	src, err := filepath.Abs("testdata/fixture.c")
	if err != nil {
		t.Fatal(err)
	}
	for fn, text := range map[string]string{
		"local_func":    "static int local_func(int x) {",
		"exported_func": "int exported_func(int x) {",
	} {
		file, line, ok := s.Line(pid, maps, addrs[fn])
		if want := sourceLine(t, src, text); !ok || file != src || line != want {
			t.Errorf("Line(%s) = %s:%d, %v; want %s:%d", fn, file, line, ok, src, want)
		}
	}
	if _, _, ok := s.Line(pid, maps, 0x10); ok {
		t.Error("Line of an address in no mapping succeeded")
	}
	if _, err := exec.LookPath("addr2line"); err != nil {
		return
	}
	base := elfSymbol(t, full, "local_func").Value
	var args []string
	for off := uint64(0); off < 32; off += 3 {
		args = append(args, fmt.Sprintf("%#x", base+off))
	}
	out := strings.Split(strings.TrimSpace(string(run(t, "addr2line", append([]string{"-e", full}, args...)...))), "\n")
	for i, o := range out {
		o, _, _ = strings.Cut(o, " (discriminator")
		i64 := uint64(i)
		colon := strings.LastIndexByte(o, ':')
		wantLine, err := strconv.Atoi(o[colon+1:])
		if err != nil || wantLine == 0 {
			continue
		}
		file, line, ok := s.Line(pid, maps, addrs["local_func"]+3*i64)
		if !ok || file != o[:colon] || line != wantLine {
			t.Errorf("Line(local_func+%d) = %s:%d, %v; addr2line says %s", 3*i, file, line, ok, o)
		}
	}
}

func TestLine(t *testing.T) {
	df := buildDebugFixture(t, "lines")
	t.Run("own DWARF", func(t *testing.T) {
		pid, addrs := startFixture(t, df.full)
		maps, err := ReadMaps(pid)
		if err != nil {
			t.Fatal(err)
		}
		s := NewSymbolizer()
		checkLines(t, s, pid, maps, addrs, df.full)
		// Without the process, the file is opened by its path.
		checkLines(t, s, 0, maps, addrs, df.full)
	})
	t.Run("debug file", func(t *testing.T) {
		dir := t.TempDir()
		install(t, df.debug, buildIDPath(dir, df.buildID))
		s, pid, maps, addrs := symbolizeLive(t, df.stripped, []string{dir}, df.withDebug(df.stripped))
		checkLines(t, s, pid, maps, addrs, df.full)
	})
	t.Run("none", func(t *testing.T) {
		pid, addrs := startFixture(t, df.stripped)
		maps, err := ReadMaps(pid)
		if err != nil {
			t.Fatal(err)
		}
		if file, line, ok := NewSymbolizer().Line(pid, maps, addrs["local_func"]); ok {
			t.Errorf("Line without DWARF = %s:%d", file, line)
		}
		// The fixture library has a .symtab but no DWARF.
		if file, line, ok := NewSymbolizer().Line(pid, maps, addrs["fixlib_func"]); ok {
			t.Errorf("Line in a library without DWARF = %s:%d", file, line)
		}
	})
}

func TestReadLineTableCorrupt(t *testing.T) {
	df := buildDebugFixture(t, "badlines")
	good, err := os.ReadFile(df.debug)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n += len(good)/50 + 1 {
		readLineTable(strings.NewReader(string(good[:n]))) // must not panic
	}
	tbl, err := readLineTable(strings.NewReader(string(good)))
	if err != nil || len(tbl.rows) == 0 {
		t.Fatalf("readLineTable: %v", err)
	}
}
