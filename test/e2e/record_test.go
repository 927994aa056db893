//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
)

// normalizeRecords renders records with thread ids as T1 (the process) and
// T2... in order of appearance, pointers as P1... in order of appearance
// (0x0 stays), and checks and drops the times.
func normalizeRecords(t *testing.T, recs []output.Record, pid int) string {
	t.Helper()
	tids := map[int32]string{int32(pid): "T1"}
	ptrs := map[string]string{"0x0": "0x0"}
	ptrRe := regexp.MustCompile(`0x[0-9a-f]+`)
	var b strings.Builder
	for i := range recs {
		r := &recs[i]
		if _, ok := tids[r.TID]; !ok {
			tids[r.TID] = fmt.Sprintf("T%d", len(tids)+1)
		}
		if r.Type == output.RecordThreadDone {
			if r.EndNS == 0 {
				t.Errorf("thread_done without its time")
			}
		} else if r.StartNS == 0 || r.EndNS < r.StartNS {
			t.Errorf("record %d: times %d %d", i, r.StartNS, r.EndNS)
		}
		line := string(output.AppendRecord(nil, r))
		_, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), ": ")
		f := strings.Fields(rest)
		// Drop the times: the last two fields, or the last one of
		// thread_done; and PRESENT_BYTES, after them (TestRecordPresentBytes).
		switch {
		case r.Type == output.RecordThreadDone:
			f = f[:len(f)-1]
		case r.Present != -1 && (r.Type == output.RecordFree || r.Type == output.RecordRealloc):
			f = f[:len(f)-3]
		default:
			f = f[:len(f)-2]
		}
		rest = ptrRe.ReplaceAllStringFunc(strings.Join(f, " "), func(p string) string {
			if _, ok := ptrs[p]; !ok {
				ptrs[p] = fmt.Sprintf("P%d", len(ptrs))
			}
			return ptrs[p]
		})
		fmt.Fprintf(&b, "%s: %s\n", tids[r.TID], rest)
	}
	return b.String()
}

// between returns the records after the first of marker a's free and up to
// marker b's allocation (excluded), plus every record of other threads.
func markedSequence(t *testing.T, recs []output.Record, pid int) []output.Record {
	t.Helper()
	var out []output.Record
	in := false
	for _, r := range recs {
		switch {
		case r.Type == output.RecordMalloc && r.Size == 12345:
			in = true
			continue
		case r.Type == output.RecordMalloc && r.Size == 12346:
			in = false
		}
		if in && !(r.Type == output.RecordFree && r.TID == int32(pid) && len(out) == 0) {
			out = append(out, r)
		}
		if !in && r.TID != int32(pid) {
			out = append(out, r)
		}
	}
	return out
}

func readRecords(t *testing.T, path string) []output.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := output.ReadRecords(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}

// launchOK runs mdtrace on a command to completion with a ready file in
// dir, fails the test unless it exits with status 0, and returns the
// traced process's PID and mdtrace's standard error.
func launchOK(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	r := runMdtrace(t, append([]string{"--ready-file", dir + "/ready"}, args...)...)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, dir+"/ready")))
	if err != nil {
		t.Fatal(err)
	}
	return pid, r.stderr
}

// TestRecordAllocsOnExit records the same sequence through the shim's probe
// sites and, with --no-preload, through probes on glibc's allocator. glibc's
// own frees of its thread cache at a thread's end, which the probes on glibc
// see, are not the program's calls and are not recorded.
func TestRecordAllocsOnExit(t *testing.T) {
	needRoot(t)
	for _, mode := range []struct{ name, golden, flag string }{
		{"sites", "record_sequence.txt", "--shim=" + shimBin()},
		{"no-preload", "record_sequence.txt", "--no-preload"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			pid, _ := launchOK(t, dir, mode.flag, "-o", "record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("record"))
			recs := readRecords(t, fmt.Sprintf("%s/rec.%d", dir, pid))
			golden(t, mode.golden, normalizeRecords(t, markedSequence(t, recs, pid), pid))
		})
	}
}

func TestRecordAllocsStress(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	pid, stderr := launchOK(t, dir, "-o", "record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("record"), "stress", "2500")
	if strings.Contains(stderr, "lost") {
		t.Errorf("records were lost:\n%s", stderr)
	}
	recs := readRecords(t, fmt.Sprintf("%s/rec.%d", dir, pid))
	// Each thread's own pairs: a malloc, then the free of its block. The
	// thread's other frees are libc's own, at thread exit.
	type counts struct{ malloc, free, done int }
	per := map[int32]*counts{}
	last := map[int32]uint64{}
	lastPtr := map[int32]uint64{}
	for _, r := range recs {
		if r.TID == int32(pid) {
			continue
		}
		c := per[r.TID]
		if c == nil {
			c = &counts{}
			per[r.TID] = c
		}
		switch r.Type {
		case output.RecordMalloc:
			c.malloc++
			lastPtr[r.TID] = r.Ptr
		case output.RecordFree:
			if r.Ptr == lastPtr[r.TID] {
				c.free++
				lastPtr[r.TID] = 0
			}
		case output.RecordThreadDone:
			c.done++
		}
		// Each thread's lines keep its call order.
		if r.StartNS != 0 {
			if r.StartNS < last[r.TID] {
				t.Errorf("thread %d: out of order", r.TID)
			}
			last[r.TID] = r.StartNS
		}
	}
	if len(per) != 4 {
		t.Fatalf("%d threads recorded, want 4", len(per))
	}
	for tid, c := range per {
		if *c != (counts{2500, 2500, 1}) {
			t.Errorf("thread %d: %d malloc, %d free, %d thread_done; want 2500 2500 1", tid, c.malloc, c.free, c.done)
		}
	}
}

func TestRecordAllocsLimit(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	pid, stderr := launchOK(t, dir, "-o", "record_allocs=5 record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("record"))
	if recs := readRecords(t, fmt.Sprintf("%s/rec.%d", dir, pid)); len(recs) != 5 {
		t.Errorf("%d records, want 5", len(recs))
	}
	msg := " I malloc_debug: Maximum number of records added, all new operations will be dropped.\n"
	if n := strings.Count(stderr, msg); n != 1 {
		t.Errorf("%d limit messages, want 1:\n%s", n, stderr)
	}
}

func TestRecordAllocsSignal46(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "-o", "record_allocs record_allocs_file="+dir+"/rec", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("record"), "hold")
	m.expectLine(t, "record: done")
	waitFile(t, dir+"/ready")
	pid, _ := strconv.Atoi(strings.TrimSpace(readFile(t, dir+"/ready")))
	m.cmd.Process.Signal(syscall.Signal(options.RecordAllocsSignal))
	waitFile(t, dir+"/rec")
	recs := readRecords(t, dir+"/rec")
	golden(t, "record_sequence.txt", normalizeRecords(t, markedSequence(t, recs, pid), pid))
	// The records were cleared: a second signal has nothing to write.
	os.Remove(dir + "/rec")
	m.cmd.Process.Signal(syscall.Signal(options.RecordAllocsSignal))
	for i := 0; i < 100 && !strings.Contains(readFile(t, dir+"/log"), "No alloc entries to write."); i++ {
		waitFile(t, dir+"/log")
		sleepBriefly()
	}
	if !strings.Contains(readFile(t, dir+"/log"), " I malloc_debug: No alloc entries to write.\n") {
		t.Errorf("no 'No alloc entries' line in the log:\n%s", readFile(t, dir+"/log"))
	}
	if _, err := os.Stat(dir + "/rec"); err == nil {
		t.Error("a file was written without records")
	}
	m.stdin.Close()
	if code := m.wait(t); code != 0 {
		t.Errorf("exit status %d", code)
	}
}

func TestRecordAllocsUnwritableFile(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "missing", "rec")
	pid, stderr := launchOK(t, dir, "-o", "record_allocs record_allocs_on_exit record_allocs_file="+path, "--", prog("record"))
	want := fmt.Sprintf(" E malloc_debug: Cannot create record alloc file %s.%d: No such file or directory\n", path, pid)
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

func TestRecordTypesMatch(t *testing.T) {
	if abi.RecordMalloc != int(output.RecordMalloc) || abi.RecordThreadDone != int(output.RecordThreadDone) ||
		abi.RecordCalloc != int(output.RecordCalloc) || abi.RecordMemalign != int(output.RecordMemalign) ||
		abi.RecordRealloc != int(output.RecordRealloc) || abi.RecordFree != int(output.RecordFree) {
		t.Error("the tracer's record types differ from the output package's")
	}
}

// TestRecordFilePerProcess: each traced process has its own record file:
// with record_allocs_on_exit a shell and its two children (record, whose
// threads make calls too) each write FILE.PID with their own threads'
// calls only.
func TestRecordFilePerProcess(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	rec := prog("record")
	r := runMdtrace(t, "-o", "record_allocs record_allocs_on_exit record_allocs_file="+dir+"/r", "--log", dir+"/log",
		"--ready-file", dir+"/ready", "--", "sh", "-c", rec+"; "+rec)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	sh, _ := strconv.Atoi(strings.TrimSpace(readFile(t, dir+"/ready")))
	files, _ := filepath.Glob(dir + "/r.*")
	if len(files) != 3 {
		t.Fatalf("record files %v, want the shell's and two children's", files)
	}
	owner := map[int32]int{} // thread -> the process whose file has it
	for _, f := range files {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(f), "r."))
		if err != nil {
			t.Fatalf("record file %s", f)
		}
		tids := map[int32]bool{}
		for _, rc := range readRecords(t, f) {
			tids[rc.TID] = true
		}
		if !tids[int32(pid)] {
			t.Errorf("%s has no call of the process's main thread", f)
		}
		if pid == sh && len(tids) != 1 {
			t.Errorf("the shell's file %s has calls of threads %v", f, tids)
		}
		for tid := range tids {
			if other, ok := owner[tid]; ok {
				t.Errorf("thread %d is in the files of %d and %d", tid, other, pid)
			}
			owner[tid] = pid
		}
	}
	if _, ok := owner[int32(sh)]; !ok {
		t.Errorf("no record file of the shell %d: %v", sh, files)
	}
}
