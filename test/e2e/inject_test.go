//go:build linux

package e2e

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInjectAttachee attaches to attachee with --inject before it leaks
// its three blocks: the leak report is the one attach mode gives, exactly,
// and mdtrace says the calls go through the shim.
func TestInjectAttachee(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := start(t, prog("attachee"))
	target.expectLine(t, "ready")
	pid := fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "--inject", "-o", "backtrace leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("attachee exit status %d", code)
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	want := "mdtrace: tracing process " + pid + " (" + prog("attachee") + "): the shim loaded with --inject takes malloc, free, calloc, realloc, reallocarray, memalign, aligned_alloc, posix_memalign, valloc and pvalloc through 5 GOT slots, in batches; the allocator itself is no longer probed"
	if !strings.Contains(m.stderr.String(), want) {
		t.Errorf("mdtrace stderr:\n%s\nwant the line:\n%s", m.stderr.String(), want)
	}
	msgs := logMessages(t, readFile(t, dir+"/log"), pid)
	golden(t, "attachee_leak_report.txt", normalizeLeakReport(t, msgs, prog("attachee")))
}

// gotSlots returns the addresses, in process pid, of the JUMP_SLOT
// relocations of the allocator's functions in its executable exe.
func gotSlots(t *testing.T, pid int, exe string) map[string]uint64 {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	rela := f.Section(".rela.plt")
	if rela == nil {
		t.Fatalf("%s has no .rela.plt", exe)
	}
	data, err := rela.Data()
	if err != nil {
		t.Fatal(err)
	}
	base := mapBase(t, pid, exe)
	slots := map[string]uint64{}
	for i := 0; i+24 <= len(data); i += 24 {
		off := binary.LittleEndian.Uint64(data[i:])
		info := binary.LittleEndian.Uint64(data[i+8:])
		sym := int(info >> 32)
		if sym == 0 || sym > len(syms) {
			continue
		}
		switch name := syms[sym-1].Name; name {
		case "malloc", "free", "calloc", "realloc":
			slots[name] = base + off
		}
	}
	return slots
}

// mapRange returns where process pid maps file: from its first mapping's
// start to its last one's end.
func mapRange(t *testing.T, pid int, file string) (start, end uint64) {
	t.Helper()
	maps := readFile(t, fmt.Sprintf("/proc/%d/maps", pid))
	want, _ := filepath.EvalSymlinks(file)
	for _, line := range strings.Split(maps, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[5] != want {
			continue
		}
		var lo, hi uint64
		fmt.Sscanf(fields[0], "%x-%x", &lo, &hi)
		if start == 0 {
			start = lo
		}
		end = hi
	}
	if start == 0 {
		t.Fatalf("process %d does not map %s", pid, want)
	}
	return start, end
}

// mapBase returns where process pid maps the first page of file.
func mapBase(t *testing.T, pid int, file string) uint64 {
	start, _ := mapRange(t, pid, file)
	return start
}

// readSlots reads the words at slots in process pid's memory.
func readSlots(t *testing.T, pid int, slots map[string]uint64) map[string]uint64 {
	t.Helper()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	out := map[string]uint64{}
	for name, at := range slots {
		var b [8]byte
		if _, err := mem.ReadAt(b[:], int64(at)); err != nil {
			t.Fatalf("reading %s's slot: %v", name, err)
		}
		out[name] = binary.LittleEndian.Uint64(b[:])
	}
	return out
}

// TestInjectDetachRestores: while mdtrace runs, attachee's GOT slots of
// malloc, free and calloc point into the shim; once mdtrace is
// interrupted they hold exactly what they held before, and the program
// goes on and ends normally.
func TestInjectDetachRestores(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := start(t, prog("attachee"))
	target.expectLine(t, "ready")
	pid := target.cmd.Process.Pid
	slots := gotSlots(t, pid, prog("attachee"))
	// Its realloc(NULL, n) is compiled as malloc: no slot of realloc.
	if len(slots) != 3 {
		t.Fatalf("slots %v, want malloc, free and calloc", slots)
	}
	before := readSlots(t, pid, slots)
	m := start(t, mdtraceBin, "-p", fmt.Sprint(pid), "--inject", "-o", "backtrace leak_track", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	lo, hi := mapRange(t, pid, shimBin())
	for name, v := range readSlots(t, pid, slots) {
		if v < lo || v >= hi {
			t.Errorf("while injected, %s's slot holds %#x, outside the shim (%#x-%#x)", name, v, lo, hi)
		}
	}
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	want := fmt.Sprintf("mdtrace: --inject: 5 GOT slots of process %d given back to the allocator\n", pid)
	if !strings.Contains(m.stderr.String(), want) {
		t.Errorf("mdtrace stderr:\n%s\nwant the line:\n%s", m.stderr.String(), want)
	}
	after := readSlots(t, pid, slots)
	for name := range before {
		if after[name] != before[name] {
			t.Errorf("after mdtrace, %s's slot holds %#x, want %#x as before", name, after[name], before[name])
		}
	}
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("attachee exit status %d", code)
	}
}

// TestInjectKilled: pairs_mt's four threads allocate under --inject, and
// mdtrace is killed with SIGKILL in the middle: the program finishes every
// pair and exits normally.
func TestInjectKilled(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	const pairs = "150000000"
	target := start(t, prog("pairs_mt"), pairs, "4")
	time.Sleep(20 * time.Millisecond)
	m := start(t, mdtraceBin, "-p", fmt.Sprint(target.cmd.Process.Pid), "--inject", "-o", "backtrace", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	time.Sleep(300 * time.Millisecond)
	m.cmd.Process.Kill()
	<-m.done
	line, _ := target.stdout.ReadString('\n')
	if code := target.wait(t); code != 0 || !strings.HasPrefix(line, "pairs "+pairs+" ") {
		t.Errorf("pairs_mt exit status %d, output %q; want 0 and all %s pairs; its stderr:\n%s\nmdtrace's:\n%s", code, line, pairs, target.stderr.String(), m.stderr.String())
	}
}

// TestInjectRefused: --inject is for -p, and not with the options that
// change blocks.
func TestInjectRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--inject", "--", prog("attachee")},
		{"-p", "1", "--inject", "-o", "record_allocs"},
		{"-p", "1", "--inject", "-o", "verify_pointers"},
	} {
		r := runMdtrace(t, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "--inject") {
			t.Errorf("mdtrace %v: exit status %d, stderr:\n%s\nwant a refusal that names --inject", args, r.code, r.stderr)
		}
	}
}
