//go:build linux

package e2e

import (
	"path/filepath"
	"testing"
)

// unknownPointerBlock is the error block of verify_pointers for a pointer
// passed to free from wild_free, called from main, as normalizeLeakReport
// leaves it.
func unknownPointerBlock(ptr string) string {
	return logDivider + "\n" +
		"+++ ALLOCATION " + ptr + " UNKNOWN POINTER (free)\n" +
		"Backtrace at time of failure:\n" +
		"          #00  pc PC  exact (wild_free+OFF)\n" +
		"          #01  pc PC  exact (main+OFF)\n" +
		logDivider + "\n"
}

// TestWildFreeUnderGuard: free((void *)0xdead0000), whose memory is not
// mapped, and free((void *)0x87654321) (valgrind's badfree) under guard
// verify_pointers. The shim knows them unknown from its table before it
// reads a header, which would kill the program with SIGSEGV: each is
// reported as UNKNOWN POINTER, as verify_pointers alone reports it, and
// skipped, and the program runs to its end.
func TestWildFreeUnderGuard(t *testing.T) {
	needRoot(t)
	want := unknownPointerBlock("0xdead0000") + unknownPointerBlock("0x87654321")
	for _, opts := range []string{"verify_pointers", "guard verify_pointers", "front_guard rear_guard=64 free_track verify_pointers"} {
		t.Run(opts, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag("--shim="), "-o", opts, "--log", logPath, "--", prog("exact"), "wild")
			if r.code != 0 || r.stdout != "wild done\n" {
				t.Fatalf("exit status %d, output %q, want 0 and \"wild done\"; stderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if got := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("exact")); got != want {
				t.Errorf("log:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
