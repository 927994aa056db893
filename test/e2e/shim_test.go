//go:build linux

package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
