//go:build linux

package e2e

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestSampleBytesShimAttached: a command launched by one mdtrace with
// --sample-bytes has a shim that samples by itself; another mdtrace that
// attaches to it with -p reads the shim's interval. With another interval
// it refuses, with a clear error and status 1, and leaves the process
// alone; with the same one its probes take each call the shim reports
// instead of sampling it twice, and without --sample-bytes the reports
// weigh the calls with the shim's interval: either way the exit heap dump
// finds testdata/sampled's leaks within five standard deviations, its
// 4096-byte blocks exactly.
func TestSampleBytesShimAttached(t *testing.T) {
	needRoot(t)
	const interval = 4096
	for _, tc := range []struct {
		name string
		args []string
		line string
	}{
		{"same", []string{"--sample-bytes", fmt.Sprint(interval)}, "mdtrace: the shim of process %s samples one allocation every 4096 bytes by itself: the probes take each call it reports, without sampling them again\n"},
		{"none", nil, "mdtrace: the shim of process %s samples one allocation every 4096 bytes by itself (it was launched by mdtrace with --sample-bytes 4096): block counts and byte totals in the reports are estimates, sizes are exact\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			outer := startEnv(t, []string{"SAMPLED_WAIT=1"}, mdtraceBin, "--sample-bytes", fmt.Sprint(interval), "--log", dir+"/outer", "--ready-file", dir+"/outer-ready", "--", prog("sampled"))
			outer.expectLine(t, "ready")
			waitFile(t, dir+"/outer-ready")
			pid := strings.TrimSpace(readFile(t, dir+"/outer-ready"))

			if tc.name == "same" {
				r := runMdtrace(t, "-p", pid, "--sample-bytes", "8192")
				want := fmt.Sprintf("mdtrace: sampling one allocation every 8192 bytes on average: block counts and byte totals in the reports are estimates, sizes are exact\nmdtrace: the shim of process %s samples one allocation every 4096 bytes by itself (it was launched by mdtrace with --sample-bytes 4096): sampling it again every 8192 bytes would make the estimates wrong; attach with --sample-bytes 4096, or without --sample-bytes\n", pid)
				if r.code != 1 || r.stderr != want {
					t.Errorf("-p with another interval: status %d, stderr:\n%q\nwant 1 and:\n%q", r.code, r.stderr, want)
				}
			}

			m := start(t, mdtraceBin, append([]string{"-p", pid, "-o", "backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix=" + dir + "/h", "--log", dir + "/log", "--ready-file", dir + "/ready"}, tc.args...)...)
			waitFile(t, dir+"/ready")
			io.WriteString(outer.stdin, "go\n")
			outer.stdin.Close()
			if code := outer.wait(t); code != 0 {
				t.Errorf("the launching mdtrace's exit status %d; stderr:\n%s", code, outer.stderr.String())
			}
			if code := m.wait(t); code != 0 {
				t.Fatalf("mdtrace -p exit status %d; stderr:\n%s", code, m.stderr.String())
			}
			stderr := m.stderr.String()
			if want := fmt.Sprintf(tc.line, pid); !strings.Contains(stderr, want) {
				t.Errorf("mdtrace -p stderr:\n%s\nwant %q in it", stderr, want)
			}
			dumps, _ := filepath.Glob(dir + "/h.*.exit.txt")
			if len(dumps) != 1 {
				t.Fatalf("dumps %v; stderr:\n%s", dumps, stderr)
			}
			checkSampledDump(t, readFile(t, dumps[0]), interval)
			log := readFile(t, dir+"/log")
			if !strings.Contains(log, "mdtrace: sampled one allocation every 4096 bytes on average: the ") {
				t.Errorf("no estimate line in the log:\n%s", log[max(0, len(log)-2000):])
			}
			if strings.Contains(log, "ALLOCATION") || strings.Contains(log, "unknown") {
				t.Errorf("pointer errors in the log:\n%s", log)
			}
		})
	}
}
