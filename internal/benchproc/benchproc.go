// Package benchproc measures a benchmark's work in a process of its own, so
// that no earlier benchmark's memory counts in its resident sizes: the
// benchmark runs one test of its own binary as a child, and the child
// reports its figures on one line of JSON.
package benchproc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
)

// Run runs the test named test of this binary as a child process, with env
// added to its environment, and decodes into figures the JSON that follows
// tag on the line where the child printed it with Print.
func Run(tb testing.TB, test string, env []string, tag string, figures any) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s in a process of its own: %v\n%s", test, err, out)
	}
	i := bytes.Index(out, []byte(tag+" "))
	if i < 0 {
		tb.Fatalf("no %s line from %s:\n%s", tag, test, out)
	}
	line, _, _ := bytes.Cut(out[i+len(tag)+1:], []byte("\n"))
	if err := json.Unmarshal(line, figures); err != nil {
		tb.Fatalf("%s's %s line: %v", test, tag, err)
	}
}

// Print prints figures as the line that Run reads.
func Print(tag string, figures any) {
	js, _ := json.Marshal(figures)
	fmt.Printf("%s %s\n", tag, js)
}

// ResetPeak returns the process's resident size in MB, after a garbage
// collection, and resets its peak (VmHWM, by writing 5 to
// /proc/self/clear_refs), so that PeakMB measures what follows.
func ResetPeak(tb testing.TB) float64 {
	tb.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	base := StatusMB(tb, "VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Fatalf("resetting the peak resident size: %v", err)
	}
	return base
}

// PeakMB returns the peak resident size in MB since ResetPeak.
func PeakMB(tb testing.TB) float64 {
	tb.Helper()
	return StatusMB(tb, "VmHWM")
}

// StatusMB reads a field of /proc/self/status given in kB, in MB.
func StatusMB(tb testing.TB, field string) float64 {
	tb.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(field+":"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseFloat(string(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte(" kB"))), 64)
		if err != nil {
			tb.Fatalf("%s in /proc/self/status: %v", field, err)
		}
		return kb * 1024 / 1e6
	}
	tb.Fatalf("no %s in /proc/self/status", field)
	return 0
}
