//go:build linux

package e2e

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInjectAttachee attaches to attachee with --inject before it leaks
// its three blocks: the leak report is the one attach mode gives, exactly,
// and mdtrace says the calls go through the shim: 7 GOT slots, attachee's
// malloc, free and calloc and glibc's own malloc, free, calloc and
// realloc (the last two bound lazily, routed all the same).
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
	want := "mdtrace: tracing process " + pid + " (" + prog("attachee") + "): the shim loaded with --inject takes malloc, free, calloc, realloc, reallocarray, memalign, aligned_alloc, posix_memalign, valloc and pvalloc through 7 GOT slots, in batches; the allocator itself is no longer probed"
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
	slotsInShim(t, pid, slots)
	interruptGivesBack(t, m, pid, 7)
	slotsBack(t, pid, slots, before, "after mdtrace")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("attachee exit status %d", code)
	}
}

// TestInjectSignalsWait: sigwatch takes a SIGALRM every 50 µs, whose
// handler allocates and records where it interrupted the program, which
// opens its mask to the signal only while it sleeps. The thread mdtrace
// makes call dlopen and the shim's functions blocks the signals meanwhile:
// no handler runs on top of those calls (in the loader, in the shim), where
// the program never is natively. The handler's calls go through the shim
// while mdtrace runs, and the program ends normally after.
func TestInjectSignalsWait(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := start(t, prog("sigwatch"))
	target.expectLine(t, "ready")
	pid := target.cmd.Process.Pid
	m := start(t, mdtraceBin, "-p", fmt.Sprint(pid), "--inject", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	time.Sleep(300 * time.Millisecond)
	interruptGivesBack(t, m, pid, 6)
	io.WriteString(target.stdin, "go\n")
	line, _ := target.stdout.ReadString('\n')
	var handled, foreign int
	if _, err := fmt.Sscanf(line, "handled %d foreign %d\n", &handled, &foreign); err != nil {
		t.Fatalf("sigwatch said %q: %v", line, err)
	}
	if foreign != 0 || handled == 0 {
		where, _ := target.stdout.ReadString('\n')
		t.Errorf("sigwatch handled %d signals, %d of them on top of mdtrace's calls; want some, none; %s", handled, foreign, where)
	}
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("sigwatch exit status %d", code)
	}
}

// interruptGivesBack interrupts mdtrace m, attached to process pid with
// --inject, and checks that it ends normally, saying it gave the process's
// slots GOT slots back to the allocator.
func interruptGivesBack(t *testing.T, m *background, pid, slots int) {
	t.Helper()
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	want := fmt.Sprintf("mdtrace: --inject: %d GOT slots of process %d given back to the allocator\n", slots, pid)
	if !strings.Contains(m.stderr.String(), want) {
		t.Errorf("mdtrace stderr:\n%s\nwant the line:\n%s", m.stderr.String(), want)
	}
}

// TestInjectKilled: pairs_mt's four threads allocate under --inject, with
// batches and with --sample-bytes (no batches: the shim's sampled calls
// find mdtrace gone), and mdtrace is killed with SIGKILL in the middle:
// the shim gives the program's GOT slots of malloc and free back to the
// allocator by itself, and the program finishes every pair and exits
// normally.
func TestInjectKilled(t *testing.T) {
	needRoot(t)
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"batched", nil},
		{"sampled", []string{"--sample-bytes", "4096"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			// Long enough that it is still running once mdtrace
			// is killed: 3 s natively here, as the injection now
			// takes it at once (150 million pairs were all made by
			// then in one run).
			const pairs = "600000000"
			target := start(t, prog("pairs_mt"), pairs, "4")
			time.Sleep(20 * time.Millisecond)
			pid := target.cmd.Process.Pid
			slots := gotSlots(t, pid, prog("pairs_mt"))
			before := readSlots(t, pid, slots)
			args := append([]string{"-p", fmt.Sprint(pid), "--inject", "-o", "backtrace", "--ready-file", dir + "/ready"}, mode.args...)
			m := start(t, mdtraceBin, args...)
			waitFile(t, dir+"/ready")
			time.Sleep(300 * time.Millisecond)
			slotsInShim(t, pid, slots)
			m.cmd.Process.Kill()
			<-m.done
			time.Sleep(100 * time.Millisecond)
			select {
			case <-target.done:
				// Ended in 100 ms, 150 million pairs short: say how.
				t.Fatalf("pairs_mt ended as mdtrace was killed: %v; its stderr:\n%s\nmdtrace's:\n%s", target.cmd.ProcessState, target.stderr.String(), m.stderr.String())
			default:
			}
			slotsBack(t, pid, slots, before, "after mdtrace was killed")
			line, _ := target.stdout.ReadString('\n')
			if code := target.wait(t); code != 0 || !strings.HasPrefix(line, "pairs "+pairs+" ") {
				t.Errorf("pairs_mt exit status %d, output %q; want 0 and all %s pairs; its stderr:\n%s\nmdtrace's:\n%s", code, line, pairs, target.stderr.String(), m.stderr.String())
			}
		})
	}
}

// TestInjectKilledInCall: mdtrace is killed with SIGKILL while the thread
// it made call dlopen waits in it (another thread holds the loader's lock,
// in a library's constructor). The call returns once the lock is let go,
// to a return from a signal handler over the frame mdtrace wrote: the
// thread goes back to its pthread_join, its signal stack and mask as they
// were, and the program ends normally, the shim loaded and unused.
func TestInjectKilledInCall(t *testing.T) {
	needRoot(t)
	prog("libslowload.so")
	target := start(t, prog("slowload"))
	target.expectLine(t, "loading")
	pid := target.cmd.Process.Pid
	m := start(t, mdtraceBin, "-p", fmt.Sprint(pid), "--inject")
	// The main thread is traced by a thread of mdtrace while the call
	// lasts.
	tracedByMdtrace := func() bool {
		tp := tracerPID(t, fmt.Sprint(pid))
		_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%s", m.cmd.Process.Pid, tp))
		return tp != "0" && err == nil
	}
	for i := 0; !tracedByMdtrace(); i++ {
		if i == 200 {
			t.Fatalf("mdtrace did not take slowload's main thread; its stderr:\n%s", m.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case <-m.done:
		t.Fatalf("mdtrace ended before it was killed: %v; stderr:\n%s", m.cmd.ProcessState, m.stderr.String())
	default:
	}
	m.cmd.Process.Kill()
	<-m.done
	io.WriteString(target.stdin, "go\n")
	line, _ := target.stdout.ReadString('\n')
	if line != "joined altstack ok mask ok\n" {
		t.Fatalf("slowload said %q, want %q; its stderr:\n%s", line, "joined altstack ok mask ok\n", target.stderr.String())
	}
	if tp := tracerPID(t, fmt.Sprint(pid)); tp != "0" {
		t.Errorf("TracerPid %s once mdtrace was killed", tp)
	}
	if maps := readFile(t, fmt.Sprintf("/proc/%d/maps", pid)); !strings.Contains(maps, "/libmdshim.so\n") {
		t.Errorf("slowload's maps have no shim, which its dlopen loaded:\n%s", maps)
	}
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("slowload exit status %d; its stderr:\n%s", code, target.stderr.String())
	}
}

// TestInjectRefused: --inject is for -p, and not with the options that
// change blocks; --inject-calls is for --all --inject, and a count.
func TestInjectRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--inject", "--", prog("attachee")},
		{"-p", "1", "--inject", "-o", "record_allocs"},
		{"-p", "1", "--inject", "-o", "verify_pointers"},
		{"-p", "1", "--inject", "--inject-calls", "100"},
		{"--all", "--inject-calls", "100"},
		{"--all", "--inject", "--inject-calls", "-1"},
	} {
		r := runMdtrace(t, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "--inject") {
			t.Errorf("mdtrace %v: exit status %d, stderr:\n%s\nwant a refusal that names --inject", args, r.code, r.stderr)
		}
	}
}

// injectAndRun starts argv, waits for its "ready", attaches mdtrace -p
// --inject with opts, lets the program go on, and once it has said done,
// ends it and mdtrace; it returns the program's pid, mdtrace's stderr and
// its log.
func injectAndRun(t *testing.T, opts, done string, argv ...string) (pid, stderr, log string) {
	t.Helper()
	dir := t.TempDir()
	target := start(t, argv[0], argv[1:]...)
	target.expectLine(t, "ready")
	pid = fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "--inject", "-o", opts, "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, done)
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("%s exit status %d", argv[0], code)
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	if !strings.Contains(m.stderr.String(), "the shim loaded with --inject takes malloc") {
		t.Errorf("mdtrace did not inject; stderr:\n%s", m.stderr.String())
	}
	return pid, m.stderr.String(), readFile(t, dir+"/log")
}

// TestInjectPython: Debian's python3, attached with --inject before it
// builds 20 bytearrays it keeps: each is reported leaked, with a backtrace
// that the shim's batches walked from the hook up to Py_BytesMain, through
// the interpreter built without frame pointers.
func TestInjectPython(t *testing.T) {
	needRoot(t)
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed", python)
	}
	// os._exit: the interpreter's finalization would free them.
	script := `import os, sys
print("ready", flush=True)
sys.stdin.readline()
kept = [bytearray(1000 + i) for i in range(20)]
print("py: done", flush=True)
sys.stdin.read()
os._exit(0)
`
	pid, _, log := injectAndRun(t, "backtrace=256 leak_track", "py: done", python, "-c", script)
	msgs := logMessages(t, log, pid)
	arrays, reached := 0, 0
	for i, msg := range msgs {
		at := strings.Index(msg, "leaked block of size ")
		if at < 0 {
			continue
		}
		var size int
		fmt.Sscanf(msg[at+len("leaked block of size "):], "%d", &size)
		// A bytearray of n bytes holds n+1.
		if size < 1001 || size > 1020 {
			continue
		}
		arrays++
		for _, f := range msgs[i+2:] {
			fm := deepFrameRe.FindStringSubmatch(f)
			if fm == nil {
				break
			}
			if fm[4] == "Py_BytesMain" {
				reached++
				break
			}
		}
	}
	if arrays != 20 || reached != 20 {
		t.Errorf("%d bytearrays leaked, %d with a backtrace to Py_BytesMain; want 20 and 20; log:\n%s", arrays, reached, log)
	}
}

// TestInjectCxxNew: cxxchain, C++ built -O2 without frame pointers,
// attached with --inject: libstdc++'s operator new calls malloc through
// libstdc++'s GOT, which the shim routes, so each of the ten Nodes leaked
// has operator new as its first frame, in libstdc++, then the whole chain
// of its callers to main and _start.
func TestInjectCxxNew(t *testing.T) {
	needRoot(t)
	pid, _, log := injectAndRun(t, "backtrace=32 leak_track", "done", prog("cxxchain"), "hold")
	msgs := logMessages(t, log, pid)
	want := []string{"Tree::grow(int)", "Tree::build(int)", "build_forest()", "main", "_start"}
	fns, files := programChain(t, msgs, 56, prog("cxxchain"))
	if len(fns) != 10 {
		t.Fatalf("%d leaked blocks of 56 bytes, want 10; log:\n%s", len(fns), log)
	}
	for i, fn := range fns {
		for j := range fn {
			fn[j], _, _ = strings.Cut(fn[j], " (.")
		}
		if !slices.Equal(fn, want) {
			t.Errorf("block %d: frames in cxxchain %q, want %q", i, fn, want)
		}
		if first := files[i][0]; !strings.Contains(first, "/libstdc++.so") {
			t.Errorf("block %d: first frame in %s, want operator new's file, libstdc++", i, first)
		}
	}
	// The first frame's function, by name.
	news := 0
	for i, m := range msgs {
		if !strings.Contains(m, "leaked block of size 56 ") || i+2 >= len(msgs) {
			continue
		}
		if fm := deepFrameRe.FindStringSubmatch(msgs[i+2]); fm != nil && fm[4] == "operator new(unsigned long)" {
			news++
		}
	}
	if news != 10 {
		t.Errorf("%d of the 10 blocks have operator new(unsigned long) as their first frame; log:\n%s", news, log)
	}
}

// TestInjectFreesBefore: prefree frees 30000 blocks from before the
// attach under --inject (more than the probes could keep aside for
// batches still to come), while another thread holds blocks it allocated
// since in its batch: every free is counted as a free of a block from
// before, none is lost, and the blocks held are not reported leaked once
// freed.
func TestInjectFreesBefore(t *testing.T) {
	needRoot(t)
	const count = 30000
	pid, stderr, log := injectAndRun(t, "backtrace leak_track", "done", prog("prefree"), fmt.Sprint(count))
	if want := fmt.Sprintf("mdtrace: --inject: %d frees of blocks allocated before the attach (or before the probes went in)\n", count); !strings.Contains(stderr, want) {
		t.Errorf("mdtrace stderr:\n%s\nwant the line %q", stderr, want)
	}
	if strings.Contains(stderr, "could not be kept") || strings.Contains(log, "could not be kept") {
		t.Errorf("frees lost; stderr:\n%s", stderr)
	}
	for _, m := range logMessages(t, log, pid) {
		if strings.Contains(m, "leaked block") {
			t.Errorf("a block reported leaked: %s", m)
		}
	}
}

// TestInjectPingPong: -p --inject on testdata/pingpong, whose blocks pass
// one at a time from main to a second thread and come back to main's
// batch at the same few addresses: the frees the probes keep aside for
// an address outnumber its ways, and join one another. The report has the
// program's two leaks and none of the passed blocks, no free is lost, and
// at most one free (of the block in the mailbox at the attach) is of a
// block from before the attach.
func TestInjectPingPong(t *testing.T) {
	needRoot(t)
	pid, stderr, log := injectAndRun(t, "backtrace leak_track", "pingpong 100000", prog("pingpong"), "100000", "wait")
	if strings.Contains(stderr, "could not be kept") || strings.Contains(log, "could not be kept") {
		t.Errorf("frees lost; stderr:\n%s", stderr)
	}
	if m := regexp.MustCompile(`--inject: (\d+) frees of blocks allocated before`).FindStringSubmatch(stderr); m != nil && m[1] != "1" {
		t.Errorf("%s frees of blocks from before the attach, want at most 1; stderr:\n%s", m[1], stderr)
	}
	var leaks []string
	for _, m := range logMessages(t, log, pid) {
		if strings.Contains(m, "leaked block") {
			leaks = append(leaks, m)
		}
	}
	if len(leaks) != 2 || !strings.Contains(leaks[0], "leaked block of size 3000 ") || !strings.Contains(leaks[1], "leaked block of size 3000 ") {
		t.Errorf("leaked blocks %q, want the two of 3000 bytes", leaks)
	}
	if n := strings.Count(log, "(pingpong_keep+"); n != 2 {
		t.Errorf("%d frames in pingpong_keep, want 2", n)
	}
	if strings.Contains(log, "(pingpong_make+") {
		t.Errorf("a passed block reported leaked; log:\n%s", log)
	}
}

// TestInjectUnderLoad: pairs_mt's four threads call malloc and free
// without a pause while --inject routes them: the switch is made at a stop
// where no thread is inside a probed call of the allocator (whose return
// probe would be lost), and mdtrace says nothing was missed.
func TestInjectUnderLoad(t *testing.T) {
	needRoot(t)
	stderr := injectDetach(t, t.TempDir(), "backtrace")
	for _, bad := range []string{"inside a call", "missed", "lost", "could not"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("mdtrace stderr says %q:\n%s", bad, stderr)
		}
	}
	if !strings.Contains(stderr, "GOT slots of process") {
		t.Errorf("mdtrace did not give the slots back; stderr:\n%s", stderr)
	}
}

// injectDetach attaches with -p --inject -o opts, logging to dir/log, to
// pairs_mt's four threads calling malloc and free without a pause, and
// detaches with SIGINT 200 ms after mdtrace is ready; it returns mdtrace's
// standard error, once it has exited 0.
func injectDetach(t *testing.T, dir, opts string) string {
	t.Helper()
	target := start(t, prog("pairs_mt"), "1000000000", "4")
	time.Sleep(50 * time.Millisecond)
	m := start(t, mdtraceBin, "-p", fmt.Sprint(target.cmd.Process.Pid), "--inject", "-o", opts, "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	time.Sleep(200 * time.Millisecond)
	m.cmd.Process.Signal(syscall.SIGINT)
	code := m.wait(t)
	target.cmd.Process.Kill()
	<-target.done
	if code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	return m.stderr.String()
}

// TestInjectDetachBatches: pairs_mt's four threads make malloc/free pairs
// under -p --inject, in batches, and mdtrace detaches with SIGINT in the
// middle. Each thread holds at most one block at any time, so the leak
// report at the detach, which reads the batches not yet handed over (their
// allocations, and their frees of blocks applied before), lists at most
// four blocks, each of 32 to 96 bytes: a block freed in a batch is not
// shown live, and none is counted twice.
func TestInjectDetachBatches(t *testing.T) {
	needRoot(t)
	for round := 0; round < 2; round++ {
		dir := t.TempDir()
		stderr := injectDetach(t, dir, "backtrace leak_track")
		if !strings.Contains(stderr, ", in batches") {
			t.Fatalf("mdtrace does not batch; stderr:\n%s", stderr)
		}
		log := readFile(t, dir+"/log")
		sizes := regexp.MustCompile(` leaked block of size (\d+) at `).FindAllStringSubmatch(log, -1)
		if len(sizes) > 4 {
			t.Errorf("%d blocks reported live at the detach, want at most 4 (one a thread):\n%s", len(sizes), log[max(0, len(log)-3000):])
		}
		for _, s := range sizes {
			if n, _ := strconv.Atoi(s[1]); n < 32 || n > 96 {
				t.Errorf("a leaked block of %d bytes, not one of pairs_mt's", n)
			}
		}
		if !regexp.MustCompile(fmt.Sprintf(`mdtrace: (\d+) bytes in %d leaked allocations`, len(sizes))).MatchString(log) && len(sizes) > 0 {
			t.Errorf("no total line for %d blocks in the log:\n%s", len(sizes), log[max(0, len(log)-2000):])
		}
		for _, bad := range []string{"lost", "missed", "could not"} {
			if strings.Contains(stderr, bad) {
				t.Errorf("mdtrace stderr says %q:\n%s", bad, stderr)
			}
		}
		// Of the blocks from before the attach, pairs_mt's threads hold
		// one each, and a call entered while the probes went in is
		// another: thousands were counted when the entry probes went in
		// before the return probes.
		if f := regexp.MustCompile(`--inject: (\d+) frees of blocks allocated before the attach`).FindStringSubmatch(stderr); f != nil {
			if n, _ := strconv.Atoi(f[1]); n > 8 {
				t.Errorf("%d frees of blocks from before the attach, want at most 8 (two a thread):\n%s", n, stderr)
			}
		}
	}
}

// slotsInShim checks that each of the GOT slots of process pid holds an
// address in the shim it was given.
func slotsInShim(t *testing.T, pid int, slots map[string]uint64) {
	t.Helper()
	lo, hi := mapRange(t, pid, shimBin())
	for name, v := range readSlots(t, pid, slots) {
		if v < lo || v >= hi {
			t.Errorf("while injected, %s's slot holds %#x, outside the shim (%#x-%#x)", name, v, lo, hi)
		}
	}
}

// slotsBack checks that each of the GOT slots of process pid holds again
// what it held before the shim came, when (after what) is said.
func slotsBack(t *testing.T, pid int, slots, before map[string]uint64, when string) {
	t.Helper()
	after := readSlots(t, pid, slots)
	for name := range before {
		if after[name] != before[name] {
			t.Errorf("%s, %s's slot holds %#x, want %#x as before", when, name, after[name], before[name])
		}
	}
}
