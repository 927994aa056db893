package unwind

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readelfRow is a row of readelf's interpreted frame tables.
type readelfRow struct {
	loc      uint64
	cfa, rbp string
	ra       string
	fdeBegin uint64
	fdeEnd   uint64
	fromCIE  bool
}

var (
	fdeLine   = regexp.MustCompile(`^[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)$`)
	cieLine   = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE `)
	rowLine   = regexp.MustCompile(`^[0-9a-f]{16} `)
	regColumn = regexp.MustCompile(`(r\d+) \(\w+\)`)
)

// readelfRows runs readelf --debug-dump=frames-interp on path and returns
// every row of every FDE, an FDE without rows of its own taking its CIE's.
func readelfRows(t *testing.T, path string) []readelfRow {
	t.Helper()
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Skip("readelf (binutils) is not installed")
	}
	// readelf exits 1 on some files (libc's) after printing every table.
	out, _ := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	var (
		rows       []readelfRow
		cols       []string
		cieRows    = map[string][]readelfRow{}
		curCIE     string
		inFDE      bool
		begin, end uint64
		fdeCIE     string
		fdeHasRows bool
	)
	flush := func() {
		if inFDE && !fdeHasRows {
			for _, r := range cieRows[fdeCIE] {
				r.loc, r.fdeBegin, r.fdeEnd, r.fromCIE = begin, begin, end, true
				rows = append(rows, r)
			}
		}
		inFDE = false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := cieLine.FindStringSubmatch(line); m != nil {
			flush()
			curCIE = m[1]
			continue
		}
		if m := fdeLine.FindStringSubmatch(line); m != nil {
			flush()
			inFDE, fdeHasRows, fdeCIE, curCIE = true, false, m[1], ""
			begin, _ = strconv.ParseUint(m[2], 16, 64)
			end, _ = strconv.ParseUint(m[3], 16, 64)
			continue
		}
		if strings.HasPrefix(line, "LOC") {
			cols = strings.Fields(line)
			continue
		}
		if !rowLine.MatchString(line) {
			continue
		}
		// "r5 (rdi)": a register rule, one column.
		f := strings.Fields(regColumn.ReplaceAllString(line, "$1"))
		r := readelfRow{rbp: "u", fdeBegin: begin, fdeEnd: end}
		r.loc, _ = strconv.ParseUint(f[0], 16, 64)
		for i, c := range cols {
			if i >= len(f) {
				break
			}
			switch c {
			case "CFA":
				r.cfa = f[i]
			case "rbp":
				r.rbp = f[i]
			case "ra":
				r.ra = f[i]
			}
		}
		if curCIE != "" {
			cieRows[curCIE] = append(cieRows[curCIE], r)
			continue
		}
		if inFDE {
			fdeHasRows = true
			rows = append(rows, r)
		}
	}
	flush()
	return rows
}

// agrees says whether our rule is readelf's row, or a stop that the row
// calls for.
func agrees(r Rule, row readelfRow) error {
	if strings.HasPrefix(row.ra, "r") {
		if r.Base != BaseNone || r.Stop == StopEnd || r.Stop == StopNone {
			return fmt.Errorf("ra in a register, got %v", r)
		}
		return nil
	}
	if row.ra == "u" {
		if r.Base == BaseNone || r.Stop != StopEnd {
			return fmt.Errorf("ra undefined, got %v", r)
		}
	}
	switch {
	case row.cfa == "exp":
		if r.Base != BasePLT && r.Base != BaseSignal && !(r.Base == BaseNone && r.Stop == StopExpression) {
			return fmt.Errorf("CFA expression, got %v", r)
		}
		return nil
	case strings.HasPrefix(row.cfa, "rsp+"), strings.HasPrefix(row.cfa, "rbp+"):
		if r.Base == BaseNone && r.Stop == StopRegister && row.rbp != "u" && !strings.HasPrefix(row.rbp, "c-") {
			return nil
		}
		want := fmt.Sprintf("%s+%d", row.cfa[:3], r.Offset)
		if r.Base == BaseNone || row.cfa != want || (r.Base == BaseRSP) != (row.cfa[:3] == "rsp") {
			return fmt.Errorf("CFA %s, got %v", row.cfa, r)
		}
	default:
		if r.Base != BaseNone {
			return fmt.Errorf("CFA %s, got %v", row.cfa, r)
		}
		return nil
	}
	switch {
	case row.rbp == "u", row.rbp == "s":
		if r.RBP != 0 {
			return fmt.Errorf("rbp %s, got %v", row.rbp, r)
		}
	case strings.HasPrefix(row.rbp, "c"):
		n, _ := strconv.Atoi(row.rbp[1:])
		if int(r.RBP) != n {
			return fmt.Errorf("rbp %s, got %v", row.rbp, r)
		}
	}
	if strings.HasPrefix(row.ra, "c") {
		n, _ := strconv.Atoi(row.ra[1:])
		if int(r.RA) != n {
			return fmt.Errorf("ra %s, got %v", row.ra, r)
		}
	}
	return nil
}

// TestAgainstReadelf: for every row readelf's interpreter gives, in real
// binaries of this machine, the table has the same rule at that address.
func TestAgainstReadelf(t *testing.T) {
	for _, path := range []string{
		"/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/usr/lib/x86_64-linux-gnu/libm.so.6",
		"/usr/bin/python3.11",
		"/usr/bin/sqlite3",
		"/usr/bin/ls",
		"/lib64/ld-linux-x86-64.so.2",
	} {
		t.Run(path, func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s is not installed", path)
			}
			tab, err := FromFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rows := readelfRows(t, path)
			if len(rows) < 100 {
				t.Fatalf("readelf gave %d rows", len(rows))
			}
			bad := 0
			for _, row := range rows {
				if row.loc >= row.fdeEnd {
					continue
				}
				r, ok := tab.Lookup(row.loc)
				if !ok {
					t.Errorf("%#x (FDE %#x..%#x): no rule", row.loc, row.fdeBegin, row.fdeEnd)
					bad++
				} else if err := agrees(r, row); err != nil {
					t.Errorf("%#x (FDE %#x..%#x): %v", row.loc, row.fdeBegin, row.fdeEnd, err)
					bad++
				}
				if bad > 20 {
					t.Fatal("too many differences")
				}
			}
			t.Logf("%d rows of readelf, %d entries", len(rows), len(tab.Entries))
		})
	}
}

// TestSignalFrame: glibc's __restore_rt, where a signal handler returns,
// reads the interrupted registers from the ucontext at rsp.
func TestSignalFrame(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	tab, err := FromFile(libc)
	if err != nil {
		t.Skip(err)
	}
	// __restore_rt is `mov $15,%eax; syscall` (48 c7 c0 0f 00 00 00 0f 05).
	f, err := os.ReadFile(libc)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range tab.Entries {
		if e.Rule.Base != BaseSignal {
			continue
		}
		found++
		want := Rule{Base: BaseSignal, Signal: true, RA: 168, Offset: 160, RBP: 120}
		if e.Rule != want {
			t.Errorf("%#x: %v, want %v", e.PC, e.Rule, want)
		}
		// The FDE starts a byte before the trampoline, by convention.
		if i := bytes.Index(f, []byte{0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05}); i < 0 || uint64(i) != e.PC+1 {
			t.Errorf("signal frame at %#x, __restore_rt at %#x", e.PC, i)
		}
	}
	if found != 1 {
		t.Errorf("%d signal frames in libc, want 1", found)
	}
}

// TestDebugFrame: a program built without unwind tables has its CFI in
// .debug_frame only (as a separate debug file does); it is read the same.
func TestDebugFrame(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src := dir + "/p.c"
	prog := `#include <stdlib.h>
__attribute__((noinline)) void *f(int n) { volatile char big[300]; big[0] = n; return malloc(n + big[0]); }
int main(int c, char **v) { return f(c) != 0; }
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := dir + "/p"
	if out, err := exec.Command("cc", "-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	tab, err := FromFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Source != ".eh_frame .debug_frame" {
		t.Fatalf("table from %s, want .eh_frame (the start files) and .debug_frame", tab.Source)
	}
	rows := readelfRows(t, bin)
	if len(rows) == 0 {
		t.Fatal("readelf gave no rows")
	}
	for _, row := range rows {
		r, ok := tab.Lookup(row.loc)
		if !ok {
			t.Errorf("%#x: no rule", row.loc)
		} else if err := agrees(r, row); err != nil {
			t.Errorf("%#x: %v", row.loc, err)
		}
	}
}
