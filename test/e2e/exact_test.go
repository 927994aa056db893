//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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

// runNative runs a test program without mdtrace and returns its exit
// status as a shell gives it (128 + the signal that killed it) and its
// standard error.
func runNative(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(prog(name), args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatal(err)
		}
	}
	return exitStatus(cmd.ProcessState), errb.String()
}

func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// programStderr is the traced program's standard error: mdtrace's own
// lines dropped.
func programStderr(stderr string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(stderr, "\n") {
		if !strings.HasPrefix(line, "mdtrace: ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestBadFreeNative: a double free of a small block (the thread cache's),
// of one in a fast bin, of a 2000-byte one (in the main heap, and in a
// thread's arena) and of one glibc maps for itself, and the free of a
// pointer inside a block, between lines the program writes to stderr.
// glibc aborts at the bad free natively (or faults on the mapped block's
// header, gone); in every launch mode it must abort there too, with the
// same message and status: the batched mode's free reaches glibc at once
// when glibc would refuse its pointer, rather than when the batch is
// handed over, after code the program never runs natively (and writes to
// stdout, whose buffer then was a block the native run never has). Every
// block live at the abort is reported: 9 (the twice freed one gone), or 10.
func TestBadFreeNative(t *testing.T) {
	needRoot(t)
	for _, c := range []struct {
		arg, last string
		leaks     int
	}{
		{"double", "before second free", 9}, {"double-big", "before second free", 9},
		{"double-mmap", "before second free", 9}, {"invalid", "before first free", 10},
		// A fast bin's first block, given back to glibc by the batch
		// before its second free; a block of a thread's own arena, and
		// the thread's TLS block (288 bytes) live.
		{"double-fast", "before second free", 9}, {"double-thread", "before second free", 10},
		// A fast bin's first block, its allocation and first free each
		// handed over before the second free.
		{"double-fast-old", "before second free", 9}, {"double-thread-old", "before second free", 10},
	} {
		code, stderr := runNative(t, "exact", c.arg)
		want := 128 + int(syscall.SIGABRT)
		if c.arg == "double-mmap" {
			want = 128 + int(syscall.SIGSEGV)
		}
		if code != want || !strings.HasSuffix(stderr, c.last+"\n"+glibcMessage(c.arg)) {
			t.Fatalf("%s natively: status %d, stderr:\n%s", c.arg, code, stderr)
		}
		for _, mode := range launchModes {
			t.Run(c.arg+"/"+mode.name, func(t *testing.T) {
				logPath := filepath.Join(t.TempDir(), "log")
				r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "leak_track", "--log", logPath, "--", prog("exact"), c.arg)
				if r.code != code || programStderr(r.stderr) != stderr {
					t.Errorf("status %d, program's stderr:\n%s\nwant %d and:\n%s", r.code, programStderr(r.stderr), code, stderr)
				}
				// A late abort let the program write to stdout, whose
				// buffer was then a block it never allocates natively.
				if r.stdout != "" {
					t.Errorf("the program went on past the bad free: stdout %q", r.stdout)
				}
				if n := strings.Count(readFile(t, logPath), " leaked block of size "); n != c.leaks {
					t.Errorf("%d leaks reported, want %d", n, c.leaks)
				}
			})
		}
	}
}

// glibcMessage is glibc's line for each bad free of testdata/exact.
func glibcMessage(arg string) string {
	switch arg {
	case "double":
		return "free(): double free detected in tcache 2\n"
	case "double-big":
		return "double free or corruption (!prev)\n"
	case "double-mmap":
		return ""
	case "double-fast", "double-fast-old":
		return "double free or corruption (fasttop)\n"
	case "double-thread", "double-thread-old":
		return "double free or corruption (out)\n"
	}
	return "free(): invalid pointer\n"
}

// TestZeroSizeBlocks: malloc(0), calloc(0, 8) and memalign(64, 0) leaked.
// Android tracks such a block as size 1, so leaks and heap dumps say 1,
// in every launch mode; record_allocs keeps the 0 asked for.
func TestZeroSizeBlocks(t *testing.T) {
	needRoot(t)
	var want strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&want, "+++ testdata/exact leaked block of size 1 at 0xPTR (leak %d of 3)\n", i)
		want.WriteString("Backtrace at time of allocation:\n          #00  pc PC  exact (zero_leaks+OFF)\n          #01  pc PC  exact (main+OFF)\n")
	}
	// Tracked as size 1: the bottom line counts 1 byte a block.
	want.WriteString("mdtrace: 3 bytes in 3 leaked allocations\n")
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "backtrace leak_track", "--log", logPath, "--", prog("exact"), "zero")
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			if got := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("exact")); got != want.String() {
				t.Errorf("log:\n%s\nwant:\n%s", got, want.String())
			}
		})
	}
	dir := t.TempDir()
	r := runMdtrace(t, "-o", "record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("exact"), "zero")
	if r.code != 0 {
		t.Fatalf("record_allocs: exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	files, _ := filepath.Glob(dir + "/rec.*")
	if len(files) != 1 {
		t.Fatalf("record files %v, want one", files)
	}
	var got []string
	lineRe := regexp.MustCompile(`^\d+: (malloc|calloc|memalign) 0x[0-9a-f]+ ((?:\d+ )?\d+) \d+ \d+$`)
	for _, line := range strings.Split(readFile(t, files[0]), "\n") {
		if m := lineRe.FindStringSubmatch(line); m != nil {
			got = append(got, m[1]+" "+m[2])
		}
	}
	if g := strings.Join(got, "\n"); !strings.HasSuffix(g, "malloc 0\ncalloc 0 8\nmemalign 64 0") {
		t.Errorf("record lines of the program's calls:\n%s\nwant them to end with malloc 0, calloc 0 8, memalign 64 0", g)
	}
}

// TestThreadEndRecords: as a thread other than the main one ends, glibc
// frees through free the blocks its thread cache holds, which the program
// freed before, and the cache itself. Those are not the program's calls:
// with probes on glibc, record_allocs once wrote each freed block twice and
// a free of the cache. Each of the four threads of exact threads frees its
// block, allocates one and ends: three lines, in every launch mode.
func TestThreadEndRecords(t *testing.T) {
	needRoot(t)
	lineRe := regexp.MustCompile(`^(\d+): (\w+) 0x[0-9a-f]+`)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("exact"), "threads")
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			files, _ := filepath.Glob(dir + "/rec.*")
			if len(files) != 1 {
				t.Fatalf("record files %v, want one", files)
			}
			pid := strings.TrimPrefix(filepath.Ext(files[0]), ".")
			byThread := map[string][]string{}
			for _, line := range strings.Split(readFile(t, files[0]), "\n") {
				if m := lineRe.FindStringSubmatch(line); m != nil && m[1] != pid {
					byThread[m[1]] = append(byThread[m[1]], m[2])
				}
			}
			if len(byThread) != 4 {
				t.Errorf("%d threads recorded, want 4: %v", len(byThread), byThread)
			}
			for tid, calls := range byThread {
				if got := strings.Join(calls, " "); got != "free malloc thread_done" {
					t.Errorf("thread %s: %s, want free malloc thread_done", tid, got)
				}
			}
		})
	}
}

// TestThreadFreesBeforeExit: four short-lived threads, one after another,
// each free the block main allocated for it (its allocation still in main's
// batch when the thread's free, and its end, come) and leak one of 33
// bytes, and main joins them. The report must be exact on every run: the
// four blocks of 33 and the four that pthread_create leaves (glibc's
// thread vectors), never a block of 48. Twenty runs, in every launch mode.
func TestThreadFreesBeforeExit(t *testing.T) {
	needRoot(t)
	leakRe := regexp.MustCompile(`^\+\+\+ testdata/exact leaked block of size (\d+) at 0xPTR \(leak \d of 8\)$`)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			runs := 20
			if mode.name != "sites" {
				runs = 3
			}
			for i := 0; i < runs; i++ {
				logPath := filepath.Join(t.TempDir(), "log")
				r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "backtrace leak_track", "--log", logPath, "--", prog("exact"), "threads")
				if r.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
				}
				report := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("exact"))
				var sizes []string
				for _, line := range strings.Split(report, "\n") {
					if m := leakRe.FindStringSubmatch(line); m != nil {
						sizes = append(sizes, m[1])
					}
				}
				n33 := strings.Count(report, " of size 33 at ")
				fromThread := strings.Count(report, "#00  pc PC  exact (thread_leak+OFF)\n")
				if len(sizes) != 8 || n33 != 4 || fromThread != 4 || strings.Contains(report, " of size 48 ") {
					t.Fatalf("run %d: leaks of sizes %v, %d of them from thread_leak, want four of 33 from it and four from pthread_create; report:\n%s", i, sizes, fromThread, report)
				}
			}
		})
	}
}

// TestFatalEndKeepsCalls: main and two threads leak 300 and 2 x 200 blocks,
// the threads then wait, and the process dies of abort() or ends with
// _exit(3), with calls still in the threads' batches: the probes drain
// each thread's batch at its end, so that every block is reported, the
// two blocks pthread_create leaves too: 702, in every launch mode.
func TestFatalEndKeepsCalls(t *testing.T) {
	needRoot(t)
	for _, c := range []struct {
		arg  string
		code int
	}{{"abort", 128 + int(syscall.SIGABRT)}, {"_exit", 3}} {
		for _, mode := range launchModes {
			t.Run(c.arg+"/"+mode.name, func(t *testing.T) {
				logPath := filepath.Join(t.TempDir(), "log")
				r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "backtrace leak_track", "--log", logPath, "--", prog("exact"), c.arg)
				if r.code != c.code {
					t.Fatalf("exit status %d, want %d; stderr:\n%s", r.code, c.code, r.stderr)
				}
				report := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("exact"))
				leaks := strings.Count(report, "+++ testdata/exact leaked block of size ")
				fromLoop := strings.Count(report, "#00  pc PC  exact (abort_leaks+OFF)\n")
				if leaks != 702 || fromLoop != 700 || !strings.Contains(report, "(leak 702 of 702)\n") {
					t.Errorf("%d leaks, %d of them from abort_leaks, want 702 and 700", leaks, fromLoop)
				}
			})
		}
	}
}

// TestDirectAllocatorCalls: a program that calls the allocator past
// malloc's name, through dlsym(libc, "malloc"), dlvsym(libc, "calloc",
// "GLIBC_2.2.5") and __libc_malloc, and python3 allocating through
// ctypes.CDLL("libc.so.6").malloc. Launched with the shim, those calls once
// went straight to glibc, past the shim's sites, and none of their blocks
// was seen: every one must be, in every launch mode, as with probes on
// glibc.
func TestDirectAllocatorCalls(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "backtrace leak_track", "--log", logPath, "--", prog("exact"), "direct")
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			report := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("exact"))
			for _, c := range []struct {
				size, fn string
				n        int
			}{{"1111", "via_dlsym", 4}, {"2222", "via_dlvsym", 3}, {"3333", "via_libc_malloc", 3}} {
				block := regexp.MustCompile(`(?m)^\+\+\+ testdata/exact leaked block of size ` + c.size + ` at 0xPTR \(leak \d+ of \d+\)\nBacktrace at time of allocation:\n          #00  pc PC  exact \(` + c.fn + `\+OFF\)\n`)
				if n := len(block.FindAllString(report, -1)); n != c.n {
					t.Errorf("%d blocks of %s from %s, want %d; report:\n%s", n, c.size, c.fn, c.n, report)
				}
			}
		})
	}

	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	script := filepath.Join(t.TempDir(), "ctypes_leak.py")
	if err := os.WriteFile(script, []byte("import ctypes\nlibc = ctypes.CDLL(\"libc.so.6\")\nlibc.malloc.restype = ctypes.c_void_p\nkeep = [libc.malloc(12345) for i in range(10)]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range launchModes {
		t.Run("python3/"+mode.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "leak_track", "--log", logPath, "--", python, script)
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			if n := strings.Count(readFile(t, logPath), " leaked block of size 12345 at "); n != 10 {
				t.Errorf("%d blocks of 12345 reported, want the 10 ctypes allocated", n)
			}
		})
	}
}

// TestLongjmpOutOfAllocator: free((void *)0xdead0000) faults inside the
// allocator's free (glibc's, or the shim's reading a guard's header), and
// the program leaves the fault's handler by siglongjmp, as it does
// natively. It then leaks a block eight calls deeper, overruns a block of
// 64 by a byte and frees it, and frees a block correctly.
//
// With the shim and guard, the jump once left the thread marked inside
// the shim: every later call passed through unchecked and unreported.
// With probes on glibc, the free's return never came: the thread's next
// allocations, deeper in the stack, counted as nested in it and were
// missed. Now the shim reports the overrun and the leak, and the probes
// the leak, with no error but the bad pointer's.
func TestLongjmpOutOfAllocator(t *testing.T) {
	needRoot(t)
	leak := "+++ testdata/exact leaked block of size 4444 at 0xPTR (leak 1 of 1)\n" +
		"Backtrace at time of allocation:\n" +
		"          #00  pc PC  exact (deep_leak+OFF)\n"
	for _, c := range []struct {
		name, flag, opts, want string
	}{
		{"sites", "--shim=", "guard backtrace leak_track",
			logDivider + "\n+++ ALLOCATION 0xPTR SIZE 64 HAS A CORRUPTED REAR GUARD\n"},
		{"no-preload", "--no-preload", "backtrace leak_track verify_pointers",
			logDivider + "\n+++ ALLOCATION 0xdead0000 UNKNOWN POINTER (free)\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(c.flag), "--no-default-suppressions", "-o", c.opts, "--log", logPath, "--", prog("exact"), "longjmp")
			if r.code != 0 || programStderr(r.stderr) != "after the fault\n" {
				t.Fatalf("exit status %d, stderr:\n%s", r.code, r.stderr)
			}
			report := normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("exact"))
			report = regexp.MustCompile(`ALLOCATION 0x[0-9a-f]+ SIZE`).ReplaceAllString(report, "ALLOCATION 0xPTR SIZE")
			if !strings.HasPrefix(report, c.want) || strings.Count(report, logDivider) != 2 || !strings.Contains(report, leak) ||
				strings.Count(report, " leaked block ") != 1 {
				t.Errorf("log:\n%s\nwant one error block starting with\n%s\nand the leak\n%s", report, c.want, leak)
			}
			if !strings.Contains(report, "#00  pc PC  exact (deep_leak+OFF)\n          #01  pc PC  exact (deep_leak+OFF)\n") {
				t.Errorf("the leak's backtrace lacks deep_leak's recursion:\n%s", report)
			}
		})
	}
}

// TestStaticExecutableShimOptions: a statically linked program has no
// dynamic loader to preload the shim, and ran with guard or fill without
// any check and without a word. mdtrace refuses such options for it, as it
// refuses them with -p, and runs nothing; leak_track, which the probes on
// the program's own allocator give, still works.
func TestStaticExecutableShimOptions(t *testing.T) {
	needRoot(t)
	for _, c := range []struct{ opts, names string }{
		{"guard", "guard"},
		{"fill leak_track", "fill"},
		{"free_track expand_alloc", "free_track, expand_alloc"},
	} {
		r := runMdtrace(t, "-o", c.opts, "--", prog("static"))
		want := "mdtrace: " + prog("static") + " is statically linked: no dynamic loader preloads the shim, which option " + c.names + " needs (without it, mdtrace probes the program's allocator)\n"
		if r.code == 0 || r.stdout != "" || r.stderr != want {
			t.Errorf("%s: exit status %d, stdout %q, stderr:\n%s\nwant a non-zero status, the program not run, and:\n%s", c.opts, r.code, r.stdout, r.stderr, want)
		}
	}
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "-o", "leak_track", "--log", logPath, "--", prog("static"))
	if r.code != 0 || r.stdout != "static done\n" {
		t.Fatalf("leak_track: exit status %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(readFile(t, logPath), " leaked block of size 5555 at "); n != 1 {
		t.Errorf("leak_track: %d leaks of 5555 reported, want 1", n)
	}
}

// TestRecordPresentBytes: record_allocs' free and realloc lines end with
// PRESENT_BYTES, Android's count of the old block's bytes on pages resident
// in memory: a block of 100 bytes all written (glibc's usable 104), one of 64
// pages, mapped for it, of which 3 were written, and a written block of 200
// (usable 200) reallocated. The shim reads /proc/self/pagemap before the
// call, as Android does; the probes on glibc read a byte of each page,
// which fails where the page is not resident.
func TestRecordPresentBytes(t *testing.T) {
	needRoot(t)
	page := os.Getpagesize()
	want := []string{
		`malloc 0x[0-9a-f]+ 100 \d+ \d+`,
		fmt.Sprintf(`memalign 0x[0-9a-f]+ %d %d \d+ \d+`, page, 64*page),
		`malloc 0x[0-9a-f]+ 200 \d+ \d+`,
		`free 0x[0-9a-f]+ \d+ \d+ 104`,
		fmt.Sprintf(`free 0x[0-9a-f]+ \d+ \d+ %d`, 3*page),
		`realloc 0x[0-9a-f]+ 0x[0-9a-f]+ 5000 \d+ \d+ 200`,
		`free 0x[0-9a-f]+ \d+ \d+ \d+`,
	}
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec", "--", prog("exact"), "present")
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			files, _ := filepath.Glob(dir + "/rec.*")
			if len(files) != 1 {
				t.Fatalf("record files %v, want one", files)
			}
			// The program's calls end the file: malloc 100, memalign,
			// malloc 200, free, free, realloc, free.
			lines := strings.Split(strings.TrimSuffix(readFile(t, files[0]), "\n"), "\n")
			if len(lines) < len(want) {
				t.Fatalf("record file:\n%s", strings.Join(lines, "\n"))
			}
			for i, line := range lines[len(lines)-len(want):] {
				if !regexp.MustCompile(`^\d+: ` + want[i] + `$`).MatchString(line) {
					t.Errorf("line %q, want %s", line, want[i])
				}
			}
		})
	}
}

// TestSameSiteFrames: 2000 allocations at one call site, every other one
// freed as the next comes, the rest (1000 blocks of 48 bytes) live at
// exit. In the shim's batches an allocation with the same frames as the
// batch's last names them instead of repeating them, also when those were
// an allocation taken back in its batch: each of the 1000 blocks has the
// whole backtrace, in every launch mode, and none is lost.
func TestSameSiteFrames(t *testing.T) {
	needRoot(t)
	for _, mode := range launchModes {
		t.Run(mode.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, modeFlag(mode.flag), "--no-default-suppressions", "-o", "backtrace leak_track", "--log", logPath, "--", prog("samesite"), "2000")
			if r.code != 0 || r.stdout != "samesite 2000\n" {
				t.Fatalf("exit status %d, output %q; stderr:\n%s", r.code, r.stdout, r.stderr)
			}
			log := readFile(t, logPath)
			if strings.Contains(log, "could not be taken") {
				t.Errorf("backtraces lost:\n%s", log)
			}
			report := normalizeLeakReport(t, logMessages(t, log, ""), prog("samesite"))
			block := regexp.MustCompile(`(?m)^\+\+\+ testdata/samesite leaked block of size 48 at 0xPTR \(leak \d+ of \d+\)\nBacktrace at time of allocation:\n` +
				`          #00  pc PC  samesite \(samesite_make\+OFF\)\n          #01  pc PC  samesite \(main\+OFF\)\n`)
			if n, all := len(block.FindAllString(report, -1)), strings.Count(report, " leaked block of size 48 "); n != 1000 || all != 1000 {
				t.Errorf("%d blocks of 48 bytes, %d of them with the whole backtrace, want 1000 and 1000; report:\n%.3000s", all, n, report)
			}
		})
	}
}
