//go:build linux

package e2e

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/internal/fixture"
)

// Processes as they are found on real machines: on another allocator than
// glibc's, in a container, running files deleted since they started.

// tcmalloc is Debian's libtcmalloc-minimal4.
const tcmalloc = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"

// otherLeaks are otheralloc's own leaks, as leakSummary gives them.
var otherLeaks = []string{"3003 other_leak_realloc", "2002 other_leak_calloc", "1001 other_leak_malloc"}

// leakSummary returns each leak of process pid's log ("" for any) as its
// size and the function of its first frame, in the report's order.
func leakSummary(t *testing.T, log, pid string) []string {
	t.Helper()
	msgs := logMessages(t, log, pid)
	var out []string
	for i, m := range msgs {
		_, rest, ok := strings.Cut(m, "leaked block of size ")
		var size int
		if _, err := fmt.Sscanf(rest, "%d", &size); !ok || err != nil {
			continue
		}
		fn := ""
		if i+2 < len(msgs) {
			if fm := frameRe.FindStringSubmatch(msgs[i+2]); fm != nil {
				fn = fm[4]
			}
		}
		out = append(out, fmt.Sprintf("%d %s", size, fn))
	}
	return out
}

// leakFirstFrame returns the first frame, as "FILE (FUNC)", of the leak of
// the given size in a log.
func leakFirstFrame(t *testing.T, log string, size int) string {
	t.Helper()
	f := leakFirstFrames(t, log, size, 1)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// leakFirstFrames returns the first n frames, each as "FILE (FUNC)", of
// the leak of the given size in a log.
func leakFirstFrames(t *testing.T, log string, size, n int) []string {
	t.Helper()
	msgs := logMessages(t, log, "")
	var out []string
	for i, m := range msgs {
		if !strings.Contains(m, fmt.Sprintf("leaked block of size %d ", size)) {
			continue
		}
		for j := i + 2; j < len(msgs) && len(out) < n; j++ {
			fm := frameRe.FindStringSubmatch(msgs[j])
			if fm == nil {
				break
			}
			out = append(out, fmt.Sprintf("%s (%s)", fm[3], fm[4]))
		}
		break
	}
	return out
}

// needLib skips a test whose allocator is not installed.
func needLib(t *testing.T, lib string) {
	t.Helper()
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("%s is not installed (make deps installs it): %v", lib, err)
	}
}

// attachOther runs argv (env added) under "mdtrace -p" from its ready line
// to its exit, and returns its pid, mdtrace's standard error and log.
func attachOther(t *testing.T, env []string, argv ...string) (pid int, stderr, log string) {
	t.Helper()
	dir := t.TempDir()
	target := startEnv(t, env, argv[0], argv[1:]...)
	target.expectLine(t, "ready")
	pid = target.cmd.Process.Pid
	m := start(t, mdtraceBin, "-p", fmt.Sprint(pid), "-o", "backtrace leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("%s exit status %d; stderr:\n%s", argv[0], code, target.stderr.String())
	}
	if code := m.wait(t); code != 0 {
		t.Errorf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	return pid, m.stderr.String(), readFile(t, dir+"/log")
}

// waitReady waits for mdtrace m's ready file, and fails at once if m
// exits first.
func waitReady(t *testing.T, m *background, path string) {
	t.Helper()
	for range 600 {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-m.done:
			t.Fatalf("mdtrace exited with status %d before it was ready; stderr:\n%s", m.cmd.ProcessState.ExitCode(), m.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s never appeared", path)
}

// tracingLine checks that mdtrace said it traces process pid (prog) in
// the allocator lib.
func tracingLine(t *testing.T, stderr string, pid int, prog, lib string) {
	t.Helper()
	prefix := fmt.Sprintf("mdtrace: tracing process %d (%s): malloc free calloc realloc ", pid, prog)
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, prefix) {
			if !strings.HasSuffix(l, " in "+lib) {
				t.Errorf("traced in the wrong allocator:\n%s\nwant it in %s", l, lib)
			}
			return
		}
	}
	t.Errorf("no line %q... in mdtrace's stderr:\n%s", prefix, stderr)
}

// TestAttachOtherAllocator: -p on a program linked with jemalloc or
// tcmalloc, whose libc the kernel mapped below the allocator, on a program
// given one by LD_PRELOAD through a symbolic link, and on one with its own
// malloc: the allocator the loader bound malloc to is probed, and the
// leaks are exactly the program's. (Probes on the first file in /proc/PID/maps that defines
// malloc, glibc's, reported 0 leaks.)
func TestAttachOtherAllocator(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name, lib, prog string
		preload         bool
	}{
		{"jemalloc linked", jemalloc, "otheralloc_jemalloc", false},
		{"tcmalloc linked", tcmalloc, "otheralloc_tcmalloc", false},
		{"jemalloc preloaded through a link", jemalloc, "otheralloc", true},
		{"tcmalloc preloaded through a link", tcmalloc, "otheralloc", true},
		{"allocator in the executable", prog("otheralloc_own"), "otheralloc_own", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			needLib(t, tc.lib)
			var env []string
			if tc.preload {
				link := filepath.Join(t.TempDir(), "libmyalloc.so")
				if err := os.Symlink(tc.lib, link); err != nil {
					t.Fatal(err)
				}
				env = []string{"LD_PRELOAD=" + link}
			}
			pid, stderr, log := attachOther(t, env, prog(tc.prog))
			real, _ := filepath.EvalSymlinks(tc.lib)
			tracingLine(t, stderr, pid, prog(tc.prog), real)
			if got := leakSummary(t, log, fmt.Sprint(pid)); !slices.Equal(got, otherLeaks) {
				t.Errorf("leaks %q, want %q; stderr:\n%s", got, otherLeaks, stderr)
			}
		})
	}
}

// TestLaunchOtherAllocator: a launched program linked with jemalloc or
// tcmalloc, or given jemalloc by LD_PRELOAD through a symbolic link, is
// traced in its allocator (the shim, whose malloc is glibc's, is not
// preloaded) from its first instruction: its own three leaks, and the blocks tcmalloc keeps until exit (the C++
// runtime's, libstdc++'s emergency exception pool, is suppressed by default).
func TestLaunchOtherAllocator(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name, lib, prog string
		preload         bool
		extra           []string // the leaks before otheralloc's own
		extraAfter      []string // and after
	}{
		{"jemalloc", jemalloc, "otheralloc_jemalloc", false, nil, nil},
		{"tcmalloc", tcmalloc, "otheralloc_tcmalloc", false, nil, []string{"16 ", "8 "}},
		{"jemalloc preloaded through a link", jemalloc, "otheralloc", true, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			needLib(t, tc.lib)
			dir := t.TempDir()
			logPath := filepath.Join(dir, "log")
			var env []string
			if tc.preload {
				link := filepath.Join(dir, "libmyalloc.so")
				if err := os.Symlink(tc.lib, link); err != nil {
					t.Fatal(err)
				}
				env = []string{"LD_PRELOAD=" + link}
			}
			r := runMdtraceEnv(t, env, "-o", "backtrace leak_track", "--log", logPath, "--", prog(tc.prog))
			if r.code != 0 || r.stdout != "ready\ndone\n" {
				t.Fatalf("exit status %d, output %q; stderr:\n%s", r.code, r.stdout, r.stderr)
			}
			real, _ := filepath.EvalSymlinks(tc.lib)
			if want := fmt.Sprintf("mdtrace: note: %s has its own malloc in %s: the shim is not preloaded\n", prog(tc.prog), real); !strings.HasPrefix(r.stderr, want) {
				t.Errorf("stderr:\n%s\nwant it to start with:\n%s", r.stderr, want)
			}
			log := readFile(t, logPath)
			got := leakSummary(t, log, "")
			want := slices.Concat(tc.extra, otherLeaks, tc.extraAfter)
			if len(got) != len(want) {
				t.Fatalf("leaks %q, want %q", got, want)
			}
			for i := range got {
				// The runtime's and the allocator's own blocks come
				// from functions that differ by version: their sizes
				// are compared, and their files below.
				if got[i] != want[i] && !(strings.HasSuffix(want[i], " ") && strings.HasPrefix(got[i], want[i])) {
					t.Errorf("leak %d: %q, want %q", i+1, got[i], want[i])
				}
			}
			for _, l := range slices.Concat(tc.extra, tc.extraAfter) {
				var size int
				fmt.Sscanf(l, "%d", &size)
				frame := leakFirstFrame(t, log, size)
				if !strings.Contains(frame, "libstdc++.so") && !strings.Contains(frame, filepath.Base(real)) {
					t.Errorf("the leak of %d bytes comes from %q, neither libstdc++ nor %s", size, frame, filepath.Base(real))
				}
			}
		})
	}
}

// TestProgramOtherAllocator: --program on programs linked with jemalloc and
// tcmalloc: each is probed in its own allocator from the moment it is
// found, and its leaks are exactly the program's, and, when the probes came
// before the allocator's own start, the allocator's blocks from then.
func TestProgramOtherAllocator(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "log")
	m := start(t, mdtraceBin, "--program", "mdtrace-targets-", "-o", "backtrace leak_track verbose", "--log", logPath, "--ready-file", dir+"/ready")
	waitFile(t, dir+"/ready")
	for _, tc := range []struct{ lib, prog string }{{jemalloc, "otheralloc_jemalloc"}, {tcmalloc, "otheralloc_tcmalloc"}} {
		t.Run(filepath.Base(tc.lib), func(t *testing.T) {
			needLib(t, tc.lib)
			path := filepath.Join(dir, "mdtrace-targets-"+tc.prog)
			if err := copyFile(prog(tc.prog), path); err != nil {
				t.Fatal(err)
			}
			target := start(t, path)
			target.expectLine(t, "ready")
			pid := target.cmd.Process.Pid
			waitLogLine(t, logPath, fmt.Sprintf(" %d I malloc_debug: %s: malloc debug enabled", pid, path))
			io.WriteString(target.stdin, "go\n")
			target.expectLine(t, "done")
			target.stdin.Close()
			if code := target.wait(t); code != 0 {
				t.Fatalf("exit status %d", code)
			}
			waitLogLine(t, logPath, fmt.Sprintf("(leak %d of %d)", len(otherLeaks), len(otherLeaks)))
			real, _ := filepath.EvalSymlinks(tc.lib)
			note := fmt.Sprintf("process %d (%s) allocates with %s: probed from now on, its earlier allocations are not tracked", pid, path, real)
			if !strings.Contains(m.stderr.String(), note) {
				t.Errorf("stderr lacks %q:\n%s", note, m.stderr.String())
			}
			// The process runs on while mdtrace probes its allocator: the
			// allocator's own blocks from its start (tcmalloc's
			// TCMallocGuard) are tracked when the probes come before its
			// constructors run, which depends on timing (every run on
			// one VM, none on another).
			plog := processLog(readFile(t, logPath), pid)
			got := slices.DeleteFunc(leakSummary(t, plog, ""), func(l string) bool {
				var size int
				fmt.Sscanf(l, "%d", &size)
				return !slices.Contains(otherLeaks, l) && strings.Contains(leakFirstFrame(t, plog, size), filepath.Base(real))
			})
			if !slices.Equal(got, otherLeaks) {
				t.Errorf("leaks %q (besides the allocator's own), want %q", got, otherLeaks)
			}
		})
	}
	m.cmd.Process.Signal(syscall.SIGINT)
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
}

// TestAttachOtherMountNamespace: -p on a process in its own mount
// namespace (unshare -m) that runs a binary from a tmpfs only it sees, with
// its own copy of libc mounted over the system's: its path in mdtrace's
// namespace holds a script, and mdtrace's libc is another file. The probes
// go on the libc the process maps, and its stacks are named from its own
// binary.
func TestAttachOtherMountNamespace(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("unshare (util-linux) is not installed: %v", err)
	}
	const systemLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	dir := t.TempDir()
	libc := filepath.Join(dir, "libc.so.6")
	if err := copyFile(systemLibc, libc); err != nil {
		t.Skipf("no glibc at the Debian path: %v", err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mnt, "contained")
	// What mdtrace would read if it took the process's paths for its own.
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("mount -t tmpfs none %s && cp %s %s && mount --bind %s %s && exec %s",
		mnt, prog("otheralloc"), path, libc, systemLibc, path)
	pid, stderr, log := attachOther(t, nil, "unshare", "-m", "--propagation", "private", "sh", "-c", script)
	tracingLine(t, stderr, pid, path, systemLibc)
	if got := leakSummary(t, log, fmt.Sprint(pid)); !slices.Equal(got, otherLeaks) {
		t.Errorf("leaks %q, want %q; stderr:\n%s", got, otherLeaks, stderr)
	}
	// Built without frame pointers: walked with the unwind tables of the
	// file the process maps.
	if got, want := leakFirstFrames(t, log, 3003, 2), []string{path + " (other_leak_realloc)", path + " (main)"}; !slices.Equal(got, want) {
		t.Errorf("frames %q, want %q", got, want)
	}
}

// TestAttachDeletedFiles: -p on a process whose executable was deleted and
// whose private copy of libc (LD_LIBRARY_PATH) was replaced by another
// file since it started, as in a package upgrade: the mapped files are
// probed and named.
func TestAttachDeletedFiles(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	libDir := filepath.Join(dir, "lib")
	if err := os.Mkdir(libDir, 0o755); err != nil {
		t.Fatal(err)
	}
	libc := filepath.Join(libDir, "libc.so.6")
	if err := copyFile("/usr/lib/x86_64-linux-gnu/libc.so.6", libc); err != nil {
		t.Skipf("no glibc at the Debian path: %v", err)
	}
	exe := filepath.Join(dir, "upgraded")
	if err := copyFile(prog("otheralloc"), exe); err != nil {
		t.Fatal(err)
	}
	target := startEnv(t, []string{"LD_LIBRARY_PATH=" + libDir}, exe)
	target.expectLine(t, "ready")
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	// A new file in the old one's place, as an upgrade renames it there.
	fixture.ReplaceFile(t, libc, []byte("not the libc the process runs\n"), 0o755)
	pid := target.cmd.Process.Pid
	m := start(t, mdtraceBin, "-p", fmt.Sprint(pid), "-o", "backtrace leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("exit status %d", code)
	}
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := readFile(t, dir+"/log")
	tracingLine(t, m.stderr.String(), pid, exe, libc)
	if got := leakSummary(t, log, fmt.Sprint(pid)); !slices.Equal(got, otherLeaks) {
		t.Errorf("leaks %q, want %q; stderr:\n%s", got, otherLeaks, m.stderr.String())
	}
	if got, want := leakFirstFrames(t, log, 3003, 2), []string{exe + " (other_leak_realloc)", exe + " (main)"}; !slices.Equal(got, want) {
		t.Errorf("frames %q, want %q", got, want)
	}
}

// TestAttachExitStatus: -p says how the process ended and exits with its
// status, 128+signal when a signal killed it, as launch mode exits.
func TestAttachExitStatus(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		arg  string
		kill bool
		code int
		end  string
	}{
		{"exit 3", "3", false, 3, "exited with status 3"},
		{"SIGSEGV", "segv", false, 139, "was killed by signal 11 (SIGSEGV)"},
		{"SIGKILL", "0", true, 137, "was killed by signal 9 (SIGKILL)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			target := start(t, prog("otheralloc"), tc.arg)
			target.expectLine(t, "ready")
			pid := target.cmd.Process.Pid
			m := start(t, mdtraceBin, "-p", fmt.Sprint(pid), "-o", "leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
			waitReady(t, m, dir+"/ready")
			io.WriteString(target.stdin, "go\n")
			target.expectLine(t, "done")
			if tc.kill {
				target.cmd.Process.Kill()
			} else {
				target.stdin.Close()
			}
			target.wait(t)
			code := m.wait(t)
			want := fmt.Sprintf("mdtrace: process %d (%s) %s\n", pid, prog("otheralloc"), tc.end)
			if code != tc.code || !strings.HasSuffix(m.stderr.String(), want) {
				t.Errorf("mdtrace exit status %d, stderr:\n%s\nwant %d, ending with:\n%s", code, m.stderr.String(), tc.code, want)
			}
		})
	}
}

// TestAllOtherMountNamespace: --all counts a process in its own mount
// namespace, started by a shell that executed it (the shell's blocks are
// not the program's), and one in a namespace with its own copy of libc,
// found within a second and counted from then on.
func TestAllOtherMountNamespace(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("unshare (util-linux) is not installed: %v", err)
	}
	const systemLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	dir := t.TempDir()
	libc := filepath.Join(dir, "libc.so.6")
	if err := copyFile(systemLibc, libc); err != nil {
		t.Skipf("no glibc at the Debian path: %v", err)
	}
	m := start(t, mdtraceBin, "--all", "--sample-bytes", "0", "--format", "json", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	contained := func(name, extra string, args ...string) (*background, string) {
		mnt := filepath.Join(dir, name)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(mnt, name)
		script := fmt.Sprintf("mount -t tmpfs none %s && cp %s %s %s&& exec %s %s", mnt, prog(strings.TrimSuffix(name, "_own_libc")), path, extra, path, strings.Join(args, " "))
		return start(t, "unshare", "-m", "--propagation", "private", "sh", "-c", script), path
	}
	shared, sharedPath := contained("leaky", "", "hold")
	shared.expectLine(t, "leaky: done")
	own, ownPath := contained("otheralloc_own_libc", fmt.Sprintf("&& mount --bind %s %s ", libc, systemLibc))
	own.expectLine(t, "ready")
	ownPID := own.cmd.Process.Pid
	notice := fmt.Sprintf("mdtrace: also auditing every process that uses the libc of process %d (%s), %s, another file than the system's libc: allocations made with it before now are not counted\n", ownPID, ownPath, systemLibc)
	for i := 0; !strings.Contains(m.stderr.String(), notice); i++ {
		if i == 100 {
			t.Fatalf("stderr lacks %q:\n%s", notice, m.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	io.WriteString(own.stdin, "go\n")
	own.expectLine(t, "done")
	a, last := lastSummary(t, m.interrupt(t))
	for _, want := range []auditRow{
		// leaky's 13 blocks, as TestAll counts them, without the shell's.
		{PID: shared.cmd.Process.Pid, AddedBlocks: 13, AddedBytes: 16194, Exe: sharedPath},
		// otheralloc's three leaks; its blocks from before were freed.
		{PID: ownPID, AddedBlocks: 3, AddedBytes: 6006, Exe: ownPath},
	} {
		i := slices.IndexFunc(a.Ranking, func(r auditRow) bool { return r.PID == want.PID })
		if i < 0 || a.Ranking[i].AddedBlocks != want.AddedBlocks || a.Ranking[i].AddedBytes != want.AddedBytes || a.Ranking[i].Exe != want.Exe {
			t.Errorf("no row of process %d with %d blocks, %d bytes, %s:\n%s", want.PID, want.AddedBlocks, want.AddedBytes, want.Exe, last)
		}
	}
	shared.stdin.Close()
	own.stdin.Close()
	shared.wait(t)
	own.wait(t)
}

// TestAttachOtherMountNamespaceDebugFile: -p on a stripped program in its
// own mount namespace whose separate debug file is in that namespace's
// /usr/lib/debug only: its frames are named from it.
func TestAttachOtherMountNamespaceDebugFile(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"unshare", "objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: %v", tool, err)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stripped")
	debug := filepath.Join(dir, "stripped.debug")
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("cp", prog("otheralloc"), bin)
	run("objcopy", "--only-keep-debug", bin, debug)
	run("strip", "--strip-all", bin)
	f, err := elf.Open(debug)
	if err != nil {
		t.Fatal(err)
	}
	var id []byte
	if s := f.Section(".note.gnu.build-id"); s != nil {
		b, _ := s.Data()
		id = b[16:]
	}
	f.Close()
	if len(id) < 2 {
		t.Fatal("no build-id in otheralloc")
	}
	hexID := fmt.Sprintf("%x", id)
	if _, err := os.Stat("/usr/lib/debug/.build-id/" + hexID[:2] + "/" + hexID[2:] + ".debug"); err == nil {
		t.Fatalf("mdtrace's namespace has the debug file of %s already", hexID)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mnt, "contained")
	// The container's own /usr/lib/debug, with the debug file by build-id
	// (a link to it, absolute in the container, as packages install them).
	script := fmt.Sprintf("mkdir -p /usr/lib/debug && mount -t tmpfs none /usr/lib/debug && "+
		"mkdir -p /usr/lib/debug/.build-id/%s /usr/lib/debug/files && cp %s /usr/lib/debug/files/contained.debug && "+
		"ln -s /usr/lib/debug/files/contained.debug /usr/lib/debug/.build-id/%s/%s.debug && "+
		"mount -t tmpfs none %s && cp %s %s && exec %s",
		hexID[:2], debug, hexID[:2], hexID[2:], mnt, bin, path, path)
	pid, stderr, log := attachOther(t, nil, "unshare", "-m", "--propagation", "private", "sh", "-c", script)
	if got := leakSummary(t, log, fmt.Sprint(pid)); !slices.Equal(got, otherLeaks) {
		t.Errorf("leaks %q, want %q; stderr:\n%s", got, otherLeaks, stderr)
	}
}

// TestAttachExecOtherMountNamespace: -p on a shell in its own mount
// namespace, with its own copy of libc mounted over the system's, that
// then executes a program from a tmpfs only it sees: the program's
// allocator is found by its loader, run in the namespace's root, and its
// leaks and stacks are its own.
func TestAttachExecOtherMountNamespace(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("unshare (util-linux) is not installed: %v", err)
	}
	const systemLibc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	dir := t.TempDir()
	libc := filepath.Join(dir, "libc.so.6")
	if err := copyFile(systemLibc, libc); err != nil {
		t.Skipf("no glibc at the Debian path: %v", err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(mnt, "contained")
	script := fmt.Sprintf("mount -t tmpfs none %s && cp %s %s && mount --bind %s %s && echo ready && read x && exec %s",
		mnt, prog("otheralloc"), path, libc, systemLibc, path)
	target := start(t, "unshare", "-m", "--propagation", "private", "sh", "-c", script)
	target.expectLine(t, "ready")
	pid := target.cmd.Process.Pid
	// Held: the program executed, with a libc of its own, is probed
	// before it runs.
	m := start(t, mdtraceBin, "-p", fmt.Sprint(pid), "--hold", "-o", "backtrace leak_track", "--log", dir+"/log", "--ready-file", dir+"/ready")
	waitReady(t, m, dir+"/ready")
	io.WriteString(target.stdin, "exec\n")
	target.expectLine(t, "ready")
	io.WriteString(target.stdin, "go\n")
	target.expectLine(t, "done")
	target.stdin.Close()
	if code := target.wait(t); code != 0 {
		t.Errorf("exit status %d; stderr:\n%s", code, target.stderr.String())
	}
	if code := m.wait(t); code != 0 {
		t.Fatalf("mdtrace exit status %d; stderr:\n%s", code, m.stderr.String())
	}
	log := processLog(readFile(t, dir+"/log"), pid)
	if got := leakSummary(t, log, fmt.Sprint(pid)); !slices.Equal(got, otherLeaks) {
		t.Errorf("leaks %q, want %q; stderr:\n%s", got, otherLeaks, m.stderr.String())
	}
	if got, want := leakFirstFrames(t, log, 3003, 2), []string{path + " (other_leak_realloc)", path + " (main)"}; !slices.Equal(got, want) {
		t.Errorf("frames %q, want %q", got, want)
	}
}
