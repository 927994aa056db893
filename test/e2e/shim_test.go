//go:build linux

package e2e

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/abi"
)

func TestShimGuardUnderMdtrace(t *testing.T) {
	needRoot(t)
	shim := filepath.Join(t.TempDir(), "libmdshim.so")
	if err := copyFile(shimBin(), shim); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "-o", "guard backtrace leak_track", "--shim", shim, "--log", logPath, "--", prog("guardy"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	// The shim's error block reaches mdtrace's log, ahead of the leak report...
	log := readFile(t, logPath)
	var block []string
	for _, m := range logMessages(t, log, "") {
		if strings.Contains(m, "guardy leaked block") {
			break
		}
		if !strings.HasPrefix(m, "          #") {
			block = append(block, regexp.MustCompile(`0x[0-9a-f]{6,}`).ReplaceAllString(m, "0xPTR"))
		}
	}
	want := []string{
		logDivider,
		"+++ ALLOCATION 0xPTR SIZE 100 HAS A CORRUPTED REAR GUARD",
		"  allocation[130] = 0xbf (expected 0xbb)",
		"  allocation[131] = 0x00 (expected 0xbb)",
		"Backtrace at time of failure:",
		logDivider,
	}
	if strings.Join(block, "\n") != strings.Join(want, "\n") {
		t.Errorf("the shim's report:\n%s\nwant:\n%s\nlog:\n%s", strings.Join(block, "\n"), strings.Join(want, "\n"), log)
	}
	if strings.Contains(r.stderr, "malloc_debug") {
		t.Errorf("malloc_debug lines on stderr with --log:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "in "+shim+"\n") {
		t.Errorf("the probes are not on the shim:\n%s", r.stderr)
	}
	// ...and mdtrace sees the size the program asked for, not the guarded one.
	want2 := "+++ testdata/guardy leaked block of size 1234 at 0xPTR (leak 1 of 1)\nBacktrace at time of allocation:\n          #00  pc PC  guardy (leak_with_guard+OFF)\n          #01  pc PC  guardy (main+OFF)\n" +
		"mdtrace: 1234 bytes in 1 leaked allocations\n"
	var report []string
	for i, m := range logMessages(t, log, "") {
		if strings.Contains(m, "guardy leaked block") {
			report = logMessages(t, log, "")[i:]
			break
		}
	}
	if got := normalizeLeakReport(t, report, prog("guardy")); got != want2 {
		t.Errorf("leak report:\n%s\nwant:\n%s", got, want2)
	}
}

// TestShimOfAnotherBuild: a shim whose interface number is not mdtrace's
// (an older or newer build beside it), or that has none, is refused before
// anything runs, with the reason, where the shim is needed (its options,
// --inject); a launch that only prefers it probes the allocator instead,
// and says so.
func TestShimOfAnotherBuild(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "libmdshim.so")
	if err := copyFile(shimBin(), other); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	at := int64(-1)
	for _, s := range syms {
		if s.Name == "mdshim_interface" {
			sec := f.Sections[s.Section]
			at = int64(sec.Offset + s.Value - sec.Addr)
		}
	}
	f.Close()
	if at < 0 {
		t.Fatal("the shim has no mdshim_interface")
	}
	fh, err := os.OpenFile(other, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], 99)
	_, err = fh.WriteAt(n[:], at)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	// A shared object that is no shim of mdtrace's at all: no number.
	none := filepath.Join(dir, "libnone.so")
	if err := copyFile(prog("libdlnofp.so"), none); err != nil {
		t.Fatal(err)
	}
	another := "mdtrace: " + other + " is another build's shim (its interface 99, this mdtrace's " + strconv.Itoa(abi.ShimInterface) + "): install mdtrace and its shim together, or give --shim\n"
	older := "mdtrace: " + none + " is an older build's shim (it says no interface; this mdtrace's is " + strconv.Itoa(abi.ShimInterface) + "): install mdtrace and its shim together, or give --shim\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shim", other, "-o", "guard", "--", "true"}, another},
		{[]string{"--shim", other, "--all", "--inject", "--duration", "1s"}, "mdtrace: --inject: " + strings.TrimPrefix(another, "mdtrace: ")},
		{[]string{"--shim", none, "-o", "guard", "--", "true"}, older},
	} {
		r := runMdtrace(t, c.args...)
		if r.code != 1 || r.stderr != c.want {
			t.Errorf("mdtrace %q: exit %d, stderr %q; want 1, %q", c.args, r.code, r.stderr, c.want)
		}
	}
	r := runMdtrace(t, "--shim", other, "--", "true")
	note := "mdtrace: note: " + strings.TrimSuffix(strings.TrimPrefix(another, "mdtrace: "), "\n") + "; probing the program's allocator instead\n"
	if r.code != 0 || !strings.HasPrefix(r.stderr, note) {
		t.Errorf("mdtrace --shim %s -- true: exit %d, stderr %q; want 0, beginning %q", other, r.code, r.stderr, note)
	}
}
