//go:build linux

package e2e

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/tracer"
)

func TestCPlusPlusNames(t *testing.T) {
	needRoot(t)
	logPath := filepath.Join(t.TempDir(), "log")
	r := runMdtrace(t, "-o", "backtrace leak_track", "--log", logPath, "--", prog("cppleak"))
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	// The shim's operator new[] calls its malloc: the block's first frame
	// is new[], and the next the function that called it.
	want := []string{
		"cppleak geo::Arena<char>::raw(unsigned long)", "cppleak main",
		"libmdshim.so operator new[](unsigned long)", "cppleak geo::Arena<char>::fresh(unsigned long)",
		"libmdshim.so operator new[](unsigned long, std::nothrow_t const&)", "cppleak geo::Arena<char>::spare(unsigned long)",
	}
	if got := leakFrames(t, readFile(t, logPath), ""); !slices.Equal(got, want) {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCPlusPlusNamesProbed: without the shim, when the program starts
// (--no-preload) or already runs (-p), the unwind tables take a block's
// backtrace through libstdc++'s operator new, which keeps no frame
// pointer, to the function that called it, as Android's unwinder does
// (new[] jumps to new: no frame of its own). jemalloc's operator new is
// probed as an allocation function: the backtrace starts where it returns.
func TestCPlusPlusNamesProbed(t *testing.T) {
	needRoot(t)
	want := []string{
		"cppleak geo::Arena<char>::raw(unsigned long)", "cppleak main",
		"libstdc++.so.6.0.30 operator new(unsigned long)", "cppleak geo::Arena<char>::fresh(unsigned long)",
		"libstdc++.so.6.0.30 operator new(unsigned long)", "libstdc++.so.6.0.30 operator new[](unsigned long, std::nothrow_t const&)",
	}
	wantJemalloc := []string{
		"cppleak geo::Arena<char>::raw(unsigned long)", "cppleak main",
		"cppleak geo::Arena<char>::fresh(unsigned long)", "cppleak main",
		"cppleak geo::Arena<char>::spare(unsigned long)", "cppleak main",
	}
	t.Run("launched", func(t *testing.T) {
		logPath := filepath.Join(t.TempDir(), "log")
		r := runMdtrace(t, "--no-preload", "-o", "backtrace leak_track", "--log", logPath, "--", prog("cppleak"))
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		if got := leakFrames(t, readFile(t, logPath), ""); !slices.Equal(got, want) {
			t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	// jemalloc's own operator new is probed as an allocation function:
	// the backtrace is taken where it returns.
	t.Run("jemalloc", func(t *testing.T) {
		if _, err := os.Stat(jemalloc); err != nil {
			t.Skipf("libjemalloc2 is not installed (make deps installs it): %v", err)
		}
		logPath := filepath.Join(t.TempDir(), "log")
		r := runMdtraceEnv(t, []string{"LD_PRELOAD=" + jemalloc}, "-o", "backtrace leak_track", "--log", logPath, "--", prog("cppleak"))
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		if got := leakFrames(t, readFile(t, logPath), ""); !slices.Equal(got, wantJemalloc) {
			t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantJemalloc, "\n"))
		}
	})
	t.Run("attached", func(t *testing.T) {
		pid, _, log := attachAndRun(t, nil, "cppleak: done", prog("cppleak"), "hold")
		if got := leakFrames(t, log, pid); !slices.Equal(got, want) {
			t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestVerboseProbePoints: --verbose says where each allocator function's
// probe went and which ones the kernel single-steps.
func TestVerboseProbePoints(t *testing.T) {
	needRoot(t)
	r := runMdtrace(t, "--no-preload", "--verbose", "-o", "backtrace", "--log", filepath.Join(t.TempDir(), "log"), "--", prog("pairs"), "10")
	if r.code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
	}
	lib, err := tracer.AllocatorOfFile(prog("pairs"), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := tracer.FuncOffset(lib.Path, "free")
	if err != nil {
		t.Fatal(err)
	}
	point, err := tracer.ProbeOffset(lib.Path, "free")
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "mdtrace: probe points: ") {
			line = l
		}
	}
	// glibc's free: past its null test, on a push.
	if want := fmt.Sprintf(" free+%d (push),", point-entry); !strings.Contains(line, want) || !strings.HasPrefix(line, "mdtrace: probe points: malloc+") {
		t.Errorf("stderr:\n%s\nwant a line of probe points with %q", r.stderr, want)
	}
	// Without --verbose, no such line.
	r = runMdtrace(t, "--no-preload", "-o", "backtrace", "--log", filepath.Join(t.TempDir(), "log"), "--", prog("pairs"), "10")
	if strings.Contains(r.stderr, "probe points") {
		t.Errorf("without --verbose:\n%s", r.stderr)
	}
	// jemalloc's free with verify_pointers: on its first instruction.
	if _, err := os.Stat(jemalloc); err != nil {
		t.Skipf("libjemalloc2 is not installed (make deps installs it): %v", err)
	}
	r = runMdtraceEnv(t, []string{"LD_PRELOAD=" + jemalloc}, "--no-preload", "--verbose", "-o", "verify_pointers", "--log", filepath.Join(t.TempDir(), "log"), "--", prog("pairs"), "10")
	if want := " free+0 (mov) single-stepped,"; !strings.Contains(r.stderr, want) {
		t.Errorf("jemalloc, verify_pointers: stderr:\n%s\nwant %q", r.stderr, want)
	}
}

// leakFrames returns the first two frames of cppleak's leaks of 777, 555
// and 333 bytes in a log, each as "FILE FUNCTION".
func leakFrames(t *testing.T, log, pid string) []string {
	t.Helper()
	msgs := logMessages(t, log, pid)
	var got []string
	for i, m := range msgs {
		if strings.Contains(m, "leaked block of size 777 ") || strings.Contains(m, "leaked block of size 555 ") ||
			strings.Contains(m, "leaked block of size 333 ") {
			for _, f := range msgs[i+2 : i+4] {
				fm := frameRe.FindStringSubmatch(f)
				if fm == nil {
					t.Fatalf("frame line %q", f)
				}
				got = append(got, fmt.Sprintf("%s %s", filepath.Base(fm[3]), fm[4]))
			}
		}
	}
	return got
}

func TestStrippedWithDebugDir(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "leaky")
	debug := filepath.Join(dir, "leaky.debug")
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("cp", prog("leaky"), bin)
	run("objcopy", "--only-keep-debug", bin, debug)
	run("strip", "--strip-all", bin)
	f, err := elf.Open(debug)
	if err != nil {
		t.Fatal(err)
	}
	var id []byte
	for _, s := range f.Sections {
		if s.Name == ".note.gnu.build-id" {
			b, _ := s.Data()
			id = b[16:]
		}
	}
	f.Close()
	if len(id) < 2 {
		t.Fatal("no build-id in leaky")
	}
	hexID := fmt.Sprintf("%x", id)
	ddir := filepath.Join(dir, "debug", ".build-id", hexID[:2])
	os.MkdirAll(ddir, 0o755)
	run("cp", debug, filepath.Join(ddir, hexID[2:]+".debug"))

	report := func(args ...string) string {
		logPath := filepath.Join(dir, "log")
		r := runMdtrace(t, append(append([]string{"-o", "backtrace leak_track", "--log", logPath}, args...), "--", bin)...)
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		return readFile(t, logPath)
	}
	if log := report(); strings.Contains(log, "(leak_malloc+") {
		t.Errorf("a stripped binary resolved local names without its debug file")
	}
	if log := report("--debug-dir", filepath.Join(dir, "debug")); !strings.Contains(log, bin+" (leak_malloc+") || !strings.Contains(log, bin+" (main+") {
		t.Errorf("names not resolved through --debug-dir:\n%s", log)
	}
}

func TestBacktraceFull(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	pid, _ := launchOK(t, dir, "-o", "bt bt_full leak_track bt_dmp_on_ex bt_dmp_pre="+dir+"/h", "--log", logPath, "--", prog("leaky"))
	// The leak report's frames in the backtrace_full form: "#0", not "#00".
	fullRe := regexp.MustCompile(`^          #(\d+)  pc ([0-9a-f]{16})  (\S+)(?: \((.+)\+(\d+)\))?$`)
	msgs := logMessages(t, readFile(t, logPath), "")
	var first []string
	for i, m := range msgs {
		if m == "Backtrace at time of allocation:" {
			fm := fullRe.FindStringSubmatch(msgs[i+1])
			if fm == nil || fm[1] != "0" {
				t.Fatalf("frame line %q", msgs[i+1])
			}
			first = append(first, fm[4])
		}
	}
	if got := strings.Join(first, " "); !strings.HasPrefix(got, "leak_pvalloc leak_aligned_alloc leak_in_constructor") {
		t.Errorf("first frames: %s", got)
	}
	// Every record of the heap dump is followed by its bt_info line.
	dump := strings.Split(readFile(t, fmt.Sprintf("%s/h.%d.exit.txt", dir, pid)), "\n")
	infoRe := regexp.MustCompile(`^  bt_info( \{"[^"]*" [0-9a-f]+ "[^"]*" [0-9a-f]+\})+$`)
	records := 0
	for i, l := range dump {
		if strings.HasPrefix(l, "z 0  sz ") {
			records++
			if !infoRe.MatchString(dump[i+1]) {
				t.Errorf("record %q followed by %q", l, dump[i+1])
			}
		}
	}
	if records != 13 {
		t.Errorf("%d records", records)
	}
	want := fmt.Sprintf(`  bt_info {"%s" `, prog("leaky"))
	if !strings.HasPrefix(dump[9], want) || !strings.Contains(dump[9], `"leak_pvalloc" `) {
		t.Errorf("first bt_info line %q", dump[9])
	}
}

func TestUnloadedLibraryNames(t *testing.T) {
	needRoot(t)
	// dlhost loads libplugin.so, which leaks, then unloads it before exit,
	// and other files are mapped over its old addresses.
	logPath := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command(mdtraceBin, "-o", "backtrace leak_track", "--log", logPath, "--", "./dlhost")
	cmd.Dir = testdataDir // a relative dlopen path, resolved in the process's directory
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	msgs := logMessages(t, readFile(t, logPath), "")
	for i, m := range msgs {
		if strings.Contains(m, "leaked block of size 4321 ") {
			fm := frameRe.FindStringSubmatch(msgs[i+2])
			if fm == nil || fm[3] != prog("libplugin.so") || fm[4] != "plugin_leak" {
				t.Errorf("the unloaded plugin's frame: %q", msgs[i+2])
			}
			return
		}
	}
	t.Errorf("no leak of 4321 bytes:\n%s", strings.Join(msgs, "\n"))
}
