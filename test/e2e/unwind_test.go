//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// programChain returns, for each leaked block of size in a malloc_debug
// log, the functions of its frames in the program at progPath, and the
// files of all its frames.
func programChain(t *testing.T, msgs []string, size int, progPath string) (fns [][]string, files [][]string) {
	t.Helper()
	head := fmt.Sprintf("leaked block of size %d ", size)
	for i := 0; i < len(msgs); i++ {
		if !strings.Contains(msgs[i], head) {
			continue
		}
		var fn, fl []string
		for _, m := range msgs[i+2:] {
			fm := deepFrameRe.FindStringSubmatch(m)
			if fm == nil {
				break
			}
			fl = append(fl, fm[3])
			if fm[3] == progPath {
				fn = append(fn, fm[4])
			}
		}
		fns = append(fns, fn)
		files = append(files, fl)
	}
	return fns, files
}

// The launch modes: the shim's batches walk their own stacks (shim/
// unwind.c), the BPF programs the others' (bpf/unwind.h).
var unwindModes = []struct{ name, flag string }{
	{"batched", "--shim="},
	{"no-preload", "--no-preload"},
	{"no-batch", "--no-batch"},
}

// TestUnwindWithoutFramePointers: a call chain twelve functions deep, built
// as distributions build code (-O2 without frame pointers, gcc and clang)
// and at -O0 with frame pointers, has its every function in the leaked
// block's backtrace, from the allocation to main and _start, launched and
// attached; every frame is in a file the process maps.
func TestUnwindWithoutFramePointers(t *testing.T) {
	needRoot(t)
	want := []string{"chain_12"}
	for i := 11; i >= 1; i-- {
		want = append(want, fmt.Sprintf("chain_%d", i))
	}
	want = append(want, "main", "_start")
	for _, name := range []string{"chain_gcc_o2", "chain_clang_o2", "chain_o0"} {
		for _, mode := range unwindModes {
			t.Run(name+"/"+mode.name, func(t *testing.T) {
				r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace=32 leak_track", "--", prog(name), "100")
				if r.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
				}
				fns, files := programChain(t, logMessages(t, r.stderr[strings.Index(r.stderr, "\n")+1:], ""), 4321, prog(name))
				if len(fns) != 1 || !slices.Equal(fns[0], want) {
					t.Fatalf("frames in %s: %v, want %v; stderr:\n%s", name, fns, want, r.stderr)
				}
				for _, f := range files[0] {
					if !strings.HasPrefix(f, "/") {
						t.Errorf("frame outside a file: %q", f)
					}
				}
				if strings.Contains(r.stderr, "backtraces end before") {
					t.Errorf("a walk stopped early:\n%s", r.stderr)
				}
			})
		}
	}
}

// TestUnwindSignalFrame: a block allocated in a signal handler has the
// handler, then the interrupted code (raise, called by interrupted) on to
// main: the walk goes through the kernel's signal frame, from the thread's
// stack or from a signal stack of its own (sigaltstack).
func TestUnwindSignalFrame(t *testing.T) {
	needRoot(t)
	want := []string{"leak_in_handler", "handler", "interrupted", "main", "_start"}
	for _, mode := range unwindModes {
		for _, stack := range []string{"", "altstack"} {
			t.Run(strings.TrimSuffix(mode.name+"/"+stack, "/"), func(t *testing.T) {
				r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track", "--", prog("sigchain"), stack)
				if r.code != 0 {
					t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
				}
				fns, _ := programChain(t, logMessages(t, r.stderr[strings.Index(r.stderr, "\n")+1:], ""), 2345, prog("sigchain"))
				if len(fns) != 1 || !slices.Equal(fns[0], want) {
					t.Fatalf("frames: %v, want %v; stderr:\n%s", fns, want, r.stderr)
				}
			})
		}
	}
}

// TestUnwindDlopen: a block a dlopen'ed library leaks has the library's
// function, then main: the library's table is loaded when it is mapped.
func TestUnwindDlopen(t *testing.T) {
	needRoot(t)
	prog("libplugin.so")
	for _, mode := range unwindModes {
		t.Run(mode.name, func(t *testing.T) {
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track", "--", prog("dlhost"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			msgs := logMessages(t, r.stderr[strings.Index(r.stderr, "\n")+1:], "")
			var got []string
			for i, m := range msgs {
				if !strings.Contains(m, "leaked block of size 4321 ") {
					continue
				}
				for _, f := range msgs[i+2:] {
					fm := deepFrameRe.FindStringSubmatch(f)
					if fm == nil {
						break
					}
					got = append(got, filepath.Base(fm[3])+" "+fm[4])
				}
			}
			if len(got) < 3 || got[0] != "libplugin.so plugin_leak" || got[1] != "dlhost main" {
				t.Fatalf("frames %v, want libplugin.so's plugin_leak, then dlhost's main; stderr:\n%s", got, r.stderr)
			}
		})
	}
}

// debianProgram is a program of the distribution, built without frame
// pointers, and a run of it that leaks.
var debianPrograms = []struct {
	path string
	args []string
	// main is a function every backtrace goes through: main's caller,
	// for sqlite3, whose main has no symbol.
	main *regexp.Regexp
}{
	{"/usr/bin/python3.11", []string{"-c", "import json; x = [json.dumps({'a': i}) for i in range(100)]"}, regexp.MustCompile(`^Py_BytesMain$`)},
	{"/usr/bin/sqlite3", []string{":memory:", "create table t(a); insert into t values(1); select * from t;"}, regexp.MustCompile(`^__libc_start_call_main$`)},
	// gcc's C++ compiler proper: 30 MB of code whose table alone takes
	// 517,000 entries, and 2,370 blocks it never frees, many from glibc's
	// gettext and locale code before main's first line.
	{cc1plus(), []string{"-quiet", "/dev/null", "-o", "/dev/null"}, regexp.MustCompile(`^main$`)},
	// coreutils, whose libselinux and libpcre2 run constructors from the
	// loader's start.
	{"/bin/ls", []string{"/"}, regexp.MustCompile(`^__libc_start_call_main$`)},
}

// cc1plus is the path of gcc's C++ compiler proper, or a path that does
// not exist when no g++ is installed.
func cc1plus() string {
	if m, _ := filepath.Glob("/usr/lib/gcc/x86_64-linux-gnu/*/cc1plus"); len(m) > 0 {
		return m[len(m)-1]
	}
	return "/usr/lib/gcc/x86_64-linux-gnu/cc1plus"
}

// TestUnwindDebianPrograms: every leaked block of Debian's python3,
// sqlite3 and cc1plus, built without frame pointers, has a backtrace that
// reaches their main, in every launch mode.
func TestUnwindDebianPrograms(t *testing.T) {
	needRoot(t)
	for _, p := range debianPrograms {
		for _, mode := range unwindModes {
			t.Run(filepath.Base(p.path)+"/"+mode.name, func(t *testing.T) {
				debianProgram(t, p.path, p.args, p.main, modeFlag(mode.flag))
			})
		}
	}
}

// debianProgram runs path under mdtrace in a launch mode and checks that
// every leaked block's backtrace has a function main matches, or comes
// from a constructor run before main.
func debianProgram(t *testing.T, path string, args []string, main *regexp.Regexp, mode string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is not installed", path)
	}
	r := runMdtrace(t, append([]string{mode, "--no-default-suppressions", "-o", "backtrace=256 leak_track", "--", path}, args...)...)
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	blocks, reached := 0, 0
	var short []string
	msgs := logMessages(t, r.stderr[strings.Index(r.stderr, "\n")+1:], "")
	for i, m := range msgs {
		if !strings.Contains(m, "leaked block of size ") {
			continue
		}
		blocks++
		var fns []string
		for _, f := range msgs[i+2:] {
			fm := deepFrameRe.FindStringSubmatch(f)
			if fm == nil {
				break
			}
			fns = append(fns, fm[4])
		}
		// A static constructor runs before main, called by
		// __libc_start_main: its stack is whole too.
		if slices.ContainsFunc(fns, main.MatchString) || len(fns) >= 2 && fns[len(fns)-2] == "__libc_start_main" && fns[len(fns)-1] == "_start" {
			reached++
		} else {
			short = append(short, strings.Join(fns, " <- "))
		}
	}
	if blocks < 10 || reached != blocks {
		t.Errorf("%d of %d blocks' backtraces reach main; the others:\n%s", reached, blocks, strings.Join(short, "\n"))
	}
	// Nor did any walk of a block freed before the end stop short: where
	// the probes walk, the walks that reach a library dlopen'ed before
	// mdtrace has loaded its table (python3's _json) are finished by
	// mdtrace once it has.
	if strings.Contains(r.stderr, "backtraces end before the outermost frame") {
		t.Errorf("walks stopped short:\n%s", r.stderr[strings.LastIndex(r.stderr[:strings.Index(r.stderr, "backtraces end before")], "\n")+1:])
	}
}

// TestUnwindAttachedPython: attached to Debian's python3 while it runs,
// every block it allocates afterwards has a backtrace through the
// interpreter to Py_BytesMain; the blocks it keeps are its 20 bytearrays.
func TestUnwindAttachedPython(t *testing.T) {
	needRoot(t)
	const python = "/usr/bin/python3.11"
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
	log, _, pid := attachPython(t, python, script, 0)
	arrays, reached := pythonArrays(t, log, pid)
	if arrays != 20 || reached != 20 {
		t.Errorf("%d bytearrays leaked, %d with a backtrace to Py_BytesMain; want 20 and 20; log:\n%s", arrays, reached, log)
	}
}

// attachPython runs script in python, which prints "ready", then "py:
// done" once it has read a line; mdtrace attaches with leak_track in
// between, and the line comes pause after it is ready. It returns
// mdtrace's log and standard error, and python's pid.
func attachPython(t *testing.T, python, script string, pause time.Duration) (log, stderr, pid string) {
	t.Helper()
	dir := t.TempDir()
	target := startEnv(t, nil, python, "-c", script)
	target.expectLine(t, "ready")
	pid = fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "-o", "backtrace=256 leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	time.Sleep(pause)
	target.stdin.Write([]byte("go\n"))
	target.expectLine(t, "py: done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("python exit status %d", code)
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	return readFile(t, dir+"/log"), m.stderr.String(), pid
}

// pythonArrays counts the blocks of 1001 to 1020 bytes (bytearrays of
// 1000 to 1019) in leak log of process pid, and those among them whose
// backtrace reaches Py_BytesMain.
func pythonArrays(t *testing.T, log, pid string) (arrays, reached int) {
	t.Helper()
	msgs := logMessages(t, log, pid)
	for i, msg := range msgs {
		var size int
		if _, err := fmt.Sscanf(msg[strings.Index(msg, "leaked block of size ")+len("leaked block of size "):], "%d", &size); err != nil || !strings.Contains(msg, "leaked block") {
			continue
		}
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
	return arrays, reached
}

// TestUnwindAttachedPythonBusy: attached to Debian's python3 while it
// allocates without a pause, even the blocks allocated as the probes go
// in have backtraces through the interpreter to Py_BytesMain (its
// unwind tables are in place before its allocator is probed): the
// interpreter has no frame pointers, and a walk without its tables ends
// at the first frame.
func TestUnwindAttachedPythonBusy(t *testing.T) {
	needRoot(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed", python)
	}
	// A bytearray every 0.2 ms until a line comes on standard input:
	// thousands of them while mdtrace attaches. os._exit: the
	// interpreter's finalization would free them.
	script := `import os, select, sys, time
kept = []
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    kept.append(bytearray(1000 + len(kept) % 20))
    time.sleep(0.0002)
sys.stdin.readline()
print("py: done", flush=True)
sys.stdin.read()
os._exit(0)
`
	log, stderr, pid := attachPython(t, python, script, 100*time.Millisecond)
	arrays, reached := pythonArrays(t, log, pid)
	if arrays < 100 || reached != arrays {
		t.Errorf("%d bytearrays leaked, %d with a backtrace to Py_BytesMain; want 100 or more, all of them; stderr:\n%s", arrays, reached, stderr)
	}
	if strings.Contains(stderr, "backtraces end before") {
		t.Errorf("walks stopped short:\n%s", stderr)
	}
}

// TestTruncatedStacksApart: a backtrace cut at the frame limit is marked
// "[truncated]" in --folded, never merged with a complete one, and counted
// at the end, whether the probes or the shim's batches walked it.
func TestTruncatedStacksApart(t *testing.T) {
	needRoot(t)
	for _, mode := range unwindModes {
		t.Run(mode.name, func(t *testing.T) {
			folded := filepath.Join(t.TempDir(), "folded")
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace=16 leak_track", "--folded", folded, "--", prog("deep"), "40", "10")
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			var cut, whole []string
			for _, l := range strings.Split(strings.TrimSpace(readFile(t, folded)), "\n") {
				if strings.HasSuffix(l, " 4242") {
					if strings.HasPrefix(l, "[truncated];recurse") {
						cut = append(cut, l)
					} else {
						whole = append(whole, l)
					}
				}
			}
			if len(cut) != 1 || len(whole) != 0 {
				t.Errorf("deep's block of 4242 bytes, 42 frames deep under backtrace=16: cut %q, whole %q", cut, whole)
			}
			if !regexp.MustCompile(`mdtrace: [1-9][0-9]* backtraces were cut at 16 frames with frames left \(backtrace=16, up to 256, for more; marked \[truncated\] in --folded\)\n`).MatchString(r.stderr) {
				t.Errorf("no line for the backtraces cut; stderr:\n%s", r.stderr)
			}
		})
	}
}

// TestUnwindGeneratedCode: blocks allocated from code generated at run
// time, in an anonymous mapping no unwind table describes, have that
// code's frame and no other, and each walk that ended there is counted
// and said, in every mode.
func TestUnwindGeneratedCode(t *testing.T) {
	needRoot(t)
	frame := regexp.MustCompile(`^ +#00  pc 0000000000000014  <unknown>$`)
	for _, mode := range unwindModes {
		t.Run(mode.name, func(t *testing.T) {
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace leak_track", "--", prog("jit"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			msgs := logMessages(t, r.stderr[strings.Index(r.stderr, "\n")+1:], "")
			blocks := 0
			for i, m := range msgs {
				if !strings.Contains(m, "leaked block of size 777 ") {
					continue
				}
				blocks++
				if i+3 >= len(msgs) || !frame.MatchString(msgs[i+2]) || strings.Contains(msgs[i+3], "#01") {
					t.Errorf("block %d: %q", blocks, msgs[i:min(i+4, len(msgs))])
				}
			}
			if want := "mdtrace: 3 backtraces end before the outermost frame: a frame the unwind tables could not go past (code outside the files mapped, or a rule mdtrace does not follow)"; blocks != 3 || !slices.Contains(msgs, want) {
				t.Errorf("%d blocks of 777 bytes, want 3, and the line %q; stderr:\n%s", blocks, want, r.stderr)
			}
		})
	}
}

// TestUnwindCxxNew: a C++ program built -O2 without frame pointers leaks
// ten blocks from operator new at the bottom of a chain of member
// functions; each has the whole chain from new's caller to main and
// _start, launched in every mode and attached (where operator new is
// libstdc++'s, itself without frame pointers, or the shim's).
func TestUnwindCxxNew(t *testing.T) {
	needRoot(t)
	want := []string{"Tree::grow(int)", "Tree::build(int)", "build_forest()", "main", "_start"}
	check := func(t *testing.T, log, pid string) {
		t.Helper()
		fns, files := programChain(t, logMessages(t, log, pid), 56, prog("cxxchain"))
		if len(fns) != 10 {
			t.Fatalf("%d leaked blocks of 56 bytes, want 10; log:\n%s", len(fns), log)
		}
		for i, fn := range fns {
			// gcc names a clone by what it changed: "(.isra.0)".
			for j := range fn {
				fn[j], _, _ = strings.Cut(fn[j], " (.")
			}
			if !slices.Equal(fn, want) {
				t.Fatalf("block %d: frames in cxxchain %q, want %q", i, fn, want)
			}
			if first := files[i][0]; !strings.Contains(first, "/libstdc++.so") && !strings.HasSuffix(first, "/libmdshim.so") {
				t.Errorf("block %d: first frame in %s, want operator new's file", i, first)
			}
		}
	}
	for _, mode := range unwindModes {
		t.Run(mode.name, func(t *testing.T) {
			r := runMdtrace(t, modeFlag(mode.flag), "-o", "backtrace=32 leak_track", "--", prog("cxxchain"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			check(t, r.stderr[strings.Index(r.stderr, "\n")+1:], "")
		})
	}
	t.Run("attached", func(t *testing.T) {
		pid, _, log := attachAndRun(t, nil, "done", prog("cxxchain"), "hold")
		check(t, log, pid)
	})
}

// blockFrames returns, for each leaked block of size in a malloc_debug
// log, its frames as "file-name function".
func blockFrames(msgs []string, size int) [][]string {
	head := fmt.Sprintf("leaked block of size %d ", size)
	var blocks [][]string
	for i, m := range msgs {
		if !strings.Contains(m, head) {
			continue
		}
		var got []string
		for _, f := range msgs[i+2:] {
			fm := deepFrameRe.FindStringSubmatch(f)
			if fm == nil {
				break
			}
			got = append(got, filepath.Base(fm[3])+" "+fm[4])
		}
		blocks = append(blocks, got)
	}
	return blocks
}

// deferredLine is the verbose line that counts the walks the probes left
// to mdtrace to finish, and those it finished.
var deferredLine = regexp.MustCompile(`mdtrace: (\d+) backtraces reached a library loaded while tracing before its unwind table: (\d+) were finished once it was loaded\n`)

// TestUnwindDeferredDlopen: a library dlopen'ed while the probes trace
// the process, built without frame pointers as the program is, has no
// unwind table until mdtrace has read the loader's notice; the walks of
// the blocks its constructor and its function leak meanwhile stop in its
// frames, and mdtrace finishes them from the stack the probes copied,
// once the table is loaded: attached before the dlopen (-p) and launched
// without the shim. Each block's backtrace is then whole, from the
// library's function to _start, no walk is counted as stopped, and every
// walk left to mdtrace was finished.
func TestUnwindDeferredDlopen(t *testing.T) {
	needRoot(t)
	prog("libdlnofp.so")
	lib := []string{"libdlnofp.so dlnofp_leaf", "libdlnofp.so dlnofp_mid", "libdlnofp.so dlnofp_top"}
	wantRun := append(slices.Clone(lib), "libdlnofp.so dlnofp_run", "dlnofp run_library", "dlnofp main",
		"libc.so.6 __libc_start_call_main", "libc.so.6 __libc_start_main", "dlnofp _start")
	check := func(t *testing.T, stderr, log string) {
		t.Helper()
		msgs := logMessages(t, log, "")
		run := blockFrames(msgs, 3002)
		if len(run) != 1 || !slices.Equal(run[0], wantRun) {
			t.Errorf("dlnofp_run's block: frames %q, want %q", run, wantRun)
		}
		// The constructor runs inside dlopen: the loader's and libc's
		// frames between it and load_library are theirs to name.
		init := blockFrames(msgs, 3001)
		if len(init) != 1 || len(init[0]) < 8 || !slices.Equal(init[0][:4], append(slices.Clone(lib), "libdlnofp.so dlnofp_init")) ||
			!slices.Equal(init[0][len(init[0])-5:], []string{"dlnofp load_library", "dlnofp main", "libc.so.6 __libc_start_call_main", "libc.so.6 __libc_start_main", "dlnofp _start"}) ||
			!strings.HasPrefix(init[0][4], "ld-linux-x86-64.so.2 ") {
			t.Errorf("the constructor's block: frames %q, want dlnofp_leaf, dlnofp_mid, dlnofp_top, dlnofp_init, the loader's frames, then load_library, main and _start", init)
		}
		if strings.Contains(stderr, "backtraces end before") {
			t.Errorf("a walk stopped early:\n%s", stderr)
		}
	}
	// deferred is the count of walks left to mdtrace in a run, every one
	// of which must have been finished.
	deferred := func(t *testing.T, stderr string) string {
		t.Helper()
		m := deferredLine.FindStringSubmatch(stderr)
		if m != nil && m[1] != m[2] {
			t.Errorf("want every walk left to mdtrace finished; stderr:\n%s", stderr)
		}
		if m == nil {
			return "0"
		}
		return m[1]
	}
	// Attached, as launched below, mdtrace sometimes reads the loader's
	// notice before the constructor runs (one run in ten or twenty
	// here): at least one of five runs must have left a walk to mdtrace.
	attach := func(t *testing.T) (stderr string) {
		dir := t.TempDir()
		target := start(t, prog("dlnofp"), "wait")
		pid := fmt.Sprint(target.cmd.Process.Pid)
		m := start(t, mdtraceBin, "-p", pid, "-o", "backtrace=32 leak_track verbose backtrace_dump_prefix="+dir+"/h", "--log", dir+"/log", "--ready-file", dir+"/ready")
		waitFile(t, dir+"/ready")
		target.stdin.Write([]byte("go\n"))
		target.expectLine(t, "dlnofp: done")
		// A heap dump while it runs: its blocks' backtraces are whole
		// there too, the two blocks' with 9 frames and at least 14.
		m.cmd.Process.Signal(syscall.Signal(47))
		dump := fmt.Sprintf("%s/h.%s.txt", dir, pid)
		waitFile(t, dump)
		for size, frames := range map[int]int{3002: 9, 3001: 14} {
			re := regexp.MustCompile(fmt.Sprintf(`(?m)^z 0  sz +%d  num +1  bt((?: [0-9a-f]+)+)$`, size))
			if dm := re.FindStringSubmatch(readFile(t, dump)); dm == nil || len(strings.Fields(dm[1])) < frames || size == 3002 && len(strings.Fields(dm[1])) != frames {
				t.Errorf("heap dump: the block of %d bytes: %q, want %d frames", size, dm, frames)
			}
		}
		target.stdin.Close()
		if code := target.wait(t); code != 0 {
			t.Errorf("dlnofp exit status %d", code)
		}
		if code := m.wait(t); code != 0 {
			t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
		}
		check(t, m.stderr.String(), readFile(t, dir+"/log"))
		return m.stderr.String()
	}
	t.Run("attach", func(t *testing.T) {
		var last string
		for run := 0; run < 5; run++ {
			last = attach(t)
			if deferred(t, last) != "0" || t.Failed() {
				return
			}
		}
		t.Errorf("want at least one walk left to mdtrace in five runs; the last run's stderr:\n%s", last)
	})
	// Launched, the constructor's walk is left to mdtrace only when it
	// runs before mdtrace has read the loader's notice; mdtrace sometimes
	// reads it first (about one run in ten here), and the walks are
	// whole either way. Each run is checked whole; at least one of five
	// must have left its walk to mdtrace.
	t.Run("no-preload", func(t *testing.T) {
		var last string
		for run := 0; run < 5; run++ {
			log := filepath.Join(t.TempDir(), "log")
			r := runMdtrace(t, "--no-preload", "-o", "backtrace=32 leak_track verbose", "--log", log, "--", prog("dlnofp"))
			if r.code != 0 {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			check(t, r.stderr, readFile(t, log))
			if deferred(t, r.stderr) != "0" || t.Failed() {
				return
			}
			last = r.stderr
		}
		t.Errorf("want at least one walk left to mdtrace in five runs; the last run's stderr:\n%s", last)
	})
	// Finished at the frame limit with frames left, a walk is cut as the
	// probes' are: marked in --folded, counted.
	t.Run("cut", func(t *testing.T) {
		dir := t.TempDir()
		r := runMdtrace(t, "--no-preload", "-o", "backtrace=5 leak_track verbose", "--log", dir+"/log", "--folded", dir+"/folded", "--", prog("dlnofp"))
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		want := "[truncated];run_library;dlnofp_run;dlnofp_top;dlnofp_mid;dlnofp_leaf 3002"
		// Without the source lines.
		folded := regexp.MustCompile(` \([^)]*\)`).ReplaceAllString(readFile(t, dir+"/folded"), "")
		if !slices.Contains(strings.Split(folded, "\n"), want) {
			t.Errorf("--folded has no line %q:\n%s", want, folded)
		}
		if !regexp.MustCompile(`mdtrace: [1-9][0-9]* backtraces were cut at 5 frames`).MatchString(r.stderr) || strings.Contains(r.stderr, "backtraces end before") {
			t.Errorf("want the cut backtraces counted, none stopped; stderr:\n%s", r.stderr)
		}
	})
}

// TestUnwindAttachedPythonDlopen: attached to Debian's python3 before it
// imports _json, a C extension it dlopen's, the blocks the module's
// initialization keeps (its types) have backtraces through _json's frames
// to Py_BytesMain, though the probes met its frames before its unwind
// table was loaded; no walk is counted as stopped. Whether the probes meet
// _json's frames before its table is loaded is a race mdtrace usually
// loses (the walks are left to it): a run where it won is made again, up
// to three runs.
func TestUnwindAttachedPythonDlopen(t *testing.T) {
	needRoot(t)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed", python)
	}
	for run := 1; !unwindAttachedPythonDlopen(t, python, run == 3); run++ {
		t.Logf("run %d: no walk was left to mdtrace (its table loaded first): again", run)
	}
}

// unwindAttachedPythonDlopen makes one run of TestUnwindAttachedPythonDlopen;
// false, the run not judged, when no walk was left to mdtrace and last is
// false.
func unwindAttachedPythonDlopen(t *testing.T, python string, last bool) bool {
	script := `import os, sys
print("ready", flush=True)
sys.stdin.readline()
import _json
print("py: done", flush=True)
sys.stdin.read()
os._exit(0)
`
	dir := t.TempDir()
	target := start(t, python, "-c", script)
	target.expectLine(t, "ready")
	pid := fmt.Sprint(target.cmd.Process.Pid)
	m := start(t, mdtraceBin, "-p", pid, "--no-default-suppressions", "-o", "backtrace=256 leak_track verbose backtrace_dump_prefix="+dir+"/h", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	target.stdin.Write([]byte("go\n"))
	target.expectLine(t, "py: done")
	// A heap dump while python runs: the walks left to mdtrace are
	// finished by then, with the files python maps there to read (not
	// held, it takes them with it as it exits).
	m.cmd.Process.Signal(syscall.Signal(47))
	waitFile(t, fmt.Sprintf("%s/h.%s.txt", dir, pid))
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("python exit status %d", code)
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	msgs := logMessages(t, readFile(t, dir+"/log"), pid)
	blocks, reached := 0, 0
	var short []string
	for i, msg := range msgs {
		if !strings.Contains(msg, "leaked block of size ") {
			continue
		}
		var fns []string
		inJSON := false
		for _, f := range msgs[i+2:] {
			fm := deepFrameRe.FindStringSubmatch(f)
			if fm == nil {
				break
			}
			fns = append(fns, filepath.Base(fm[3])+" "+fm[4])
			inJSON = inJSON || strings.HasPrefix(filepath.Base(fm[3]), "_json.")
		}
		if !inJSON {
			continue
		}
		blocks++
		if slices.Contains(fns, "python3.11 Py_BytesMain") && fns[len(fns)-1] == "python3.11 _start" {
			reached++
		} else {
			short = append(short, strings.Join(fns, " <- "))
		}
	}
	if blocks == 0 || reached != blocks {
		t.Errorf("%d of %d blocks allocated in _json's frames have a backtrace to Py_BytesMain and _start; the others:\n%s", reached, blocks, strings.Join(short, "\n"))
	}
	stderr := m.stderr.String()
	dm := deferredLine.FindStringSubmatch(stderr)
	if (dm == nil || dm[1] == "0") && !last {
		return false
	}
	if strings.Contains(stderr, "backtraces end before") {
		t.Errorf("a walk stopped early:\n%s", stderr)
	}
	if dm == nil || dm[1] == "0" || dm[1] != dm[2] {
		t.Errorf("want every walk left to mdtrace finished, at least one; stderr:\n%s", stderr)
	}
	return true
}
