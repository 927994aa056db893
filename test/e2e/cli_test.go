//go:build linux

package e2e

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLaunchTerminated(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "--leak-track", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("leaky"), "hold")
	m.expectLine(t, "leaky: done")
	waitFile(t, dir+"/ready")
	child := strings.TrimSpace(readFile(t, dir+"/ready"))
	m.cmd.Process.Signal(syscall.SIGTERM)
	if code := m.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want 143; stderr:\n%s", code, m.stderr.String())
	}
	if n := strings.Count(readFile(t, dir+"/log"), "leaked block"); n != 13 {
		t.Errorf("%d leaks reported at SIGTERM, want 13", n)
	}
	// The command was left running, untraced; it exits when its input closes.
	status := readFile(t, "/proc/"+child+"/status")
	if !strings.Contains(status, "TracerPid:\t0\n") {
		t.Errorf("the command is still traced after mdtrace exited:\n%s", status)
	}
	m.stdin.Close()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat("/proc/" + child); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("the command %s did not exit when its input closed", child)
}

func TestExitStatus(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		arg  string
		code int
	}{{"0", 0}, {"7", 7}, {"abort", 128 + int(syscall.SIGABRT)}} {
		r := runMdtrace(t, "--leak-track", "--log", "/dev/null", "--", prog("leaky"), tc.arg)
		if r.code != tc.code {
			t.Errorf("leaky %s: exit status %d, want %d; stderr:\n%s", tc.arg, r.code, tc.code, r.stderr)
		}
	}
	// A device given as the log is written to, never replaced.
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("/dev/null is no longer a device: %v %v", fi.Mode(), err)
	}
}

// zombie returns the PID of a process that has exited and not been reaped.
func zombie(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Wait() })
	for i := 0; i < 100; i++ {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if strings.Contains(string(b), ") Z ") {
			return cmd.Process.Pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no zombie")
	return 0
}

// i386Program writes a minimal 32-bit x86 program that exits at once.
func i386Program(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	// ELF header.
	b.Write([]byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	le := func(v any) { binaryWrite(&b, v) }
	le(uint16(elf.ET_EXEC))
	le(uint16(elf.EM_386))
	le(uint32(1))          // version
	le(uint32(0x08048054)) // entry
	le(uint32(52))         // phoff
	le(uint32(0))          // shoff
	le(uint32(0))          // flags
	le(uint16(52))         // ehsize
	le(uint16(32))         // phentsize
	le(uint16(1))          // phnum
	le(uint16(0))          // shentsize
	le(uint16(0))          // shnum
	le(uint16(0))          // shstrndx
	// One PT_LOAD of the whole file.
	le(uint32(elf.PT_LOAD))
	le(uint32(0))
	le(uint32(0x08048000))
	le(uint32(0x08048000))
	le(uint32(84 + 12))
	le(uint32(84 + 12))
	le(uint32(elf.PF_R | elf.PF_X))
	le(uint32(0x1000))
	// exit(0): mov eax,1; xor ebx,ebx; int 0x80
	b.Write([]byte{0xb8, 1, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80, 0x90, 0x90, 0x90})
	path := filepath.Join(t.TempDir(), "prog32")
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func binaryWrite(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case uint16:
		b.Write([]byte{byte(x), byte(x >> 8)})
	case uint32:
		b.Write([]byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)})
	}
}

func TestBadInput(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	z := zombie(t)
	prog32 := i386Program(t)
	type badCase struct {
		name   string
		args   []string
		code   int
		stderr string // the whole of standard error
	}
	cases := []badCase{
		{"unknown pid", []string{"-p", "2147483000"}, 1, "mdtrace: no process with PID 2147483000\n"},
		{"negative pid", []string{"-p", "-5"}, 2, "mdtrace: invalid PID -5\nRun 'mdtrace --help' for usage.\n"},
		{"not a number", []string{"-p", "abc"}, 2, "mdtrace: invalid argument \"abc\" for \"-p, --pid\" flag: strconv.ParseInt: parsing \"abc\": invalid syntax\nRun 'mdtrace --help' for usage.\n"},
		{"exited process", []string{"-p", fmt.Sprint(z)}, 1, fmt.Sprintf("mdtrace: process %d: the process exited\n", z)},
		{"nothing to trace", nil, 2, "mdtrace: nothing to trace: give -p PID, --program NAME or a command after --\nRun 'mdtrace --help' for usage.\n"},
		{"pid and command", []string{"-p", "1", "--", "true"}, 2, "mdtrace: give either -p PID or a command, not both\nRun 'mdtrace --help' for usage.\n"},
		{"unknown flag", []string{"--frobnicate", "--", "true"}, 2, "mdtrace: unknown flag: --frobnicate\nRun 'mdtrace --help' for usage.\n"},
		{"bad option value", []string{"-o", "backtrace=XXX", "--", "true"}, 2,
			"mdtrace: bad value for option 'backtrace'\nmdtrace: For malloc debug option descriptions go to:\nmdtrace:   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md\n"},
		{"option out of range", []string{"-o", "backtrace=300", "--", "true"}, 2,
			"mdtrace: bad value for option 'backtrace', value must be <= 256: 300\nmdtrace: For malloc debug option descriptions go to:\nmdtrace:   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md\n"},
		{"unknown option", []string{"-o", "backtrace unknown_option", "--", "true"}, 2,
			"mdtrace: unknown option unknown_option\nmdtrace: For malloc debug option descriptions go to:\nmdtrace:   https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md\n"},
		{"flag option value", []string{"--leak-track=12", "--", "true"}, 2, "mdtrace: value set for option 'leak_track' which does not take a value\nRun 'mdtrace --help' for usage.\n"},
		{"shim option with -p", []string{"-p", "1", "-o", "guard"}, 2, "mdtrace: option guard rewrites memory through the preloaded shim: it needs a command launched by mdtrace, not -p\n"},
		{"command not found", []string{"--", dir + "/nonexistent"}, 127, "mdtrace: cannot run " + dir + "/nonexistent: exec: \"" + dir + "/nonexistent\": stat " + dir + "/nonexistent: no such file or directory\n"},
		{"no malloc", []string{"--", mdtraceBin, "--version"}, 1, "mdtrace: " + mdtraceBin + ": neither it nor its libraries define malloc: no malloc to trace\n"},
		{"32-bit program", []string{"--", prog32}, 1, "mdtrace: cannot trace " + prog32 + ": not a 64-bit x86-64 program\n"},
		{"no-preload with a shim option", []string{"--no-preload", "-o", "guard", "--", "true"}, 2, "mdtrace: option guard rewrites memory through the preloaded shim, which --no-preload turns off\n"},
		{"follow-forks without -p", []string{"--follow-forks", "--", "true"}, 2, "mdtrace: --follow-forks is for -p: a launched command's children are always traced\nRun 'mdtrace --help' for usage.\n"},
		{"hold without -p", []string{"--hold", "--", "true"}, 2, "mdtrace: --hold is for -p: a launched command is always held, and --program holds each process\nRun 'mdtrace --help' for usage.\n"},
		{"no-preload with -p", []string{"--no-preload", "-p", "1"}, 2, "mdtrace: --no-preload is for launched commands; with -p nothing is preloaded\nRun 'mdtrace --help' for usage.\n"},
		{"missing shim", []string{"--shim", dir + "/nope.so", "-o", "guard", "--", "true"}, 1, "mdtrace: the shim (--shim): reading " + dir + "/nope.so: open " + dir + "/nope.so: no such file or directory\n"},
		{"all with a command", []string{"--all", "--", "true"}, 2, "mdtrace: --all audits every process: give neither -p, --program nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"all with options", []string{"--all", "-o", "backtrace leak_track"}, 2, "mdtrace: --all takes only the backtrace option (the sites of each process's growth) and its heap dumps' (backtrace_dump_on_exit, backtrace_dump_prefix), not leak_track\nRun 'mdtrace --help' for usage.\n"},
		{"all dumps without backtraces", []string{"--all", "-o", "backtrace_dump_on_exit"}, 2, "mdtrace: --all writes heap dumps only with the backtrace option\nRun 'mdtrace --help' for usage.\n"},
		{"all with a bad format", []string{"--all", "--format", "xml"}, 2, "mdtrace: invalid --format \"xml\": text or json\nRun 'mdtrace --help' for usage.\n"},
		{"duration without all", []string{"--duration", "1s", "--", "true"}, 2, "mdtrace: --duration and --format are for --all's audit\nRun 'mdtrace --help' for usage.\n"},
		{"interval without backtrace", []string{"--interval", "1s", "-o", "leak_track", "--", "true"}, 2, "mdtrace: --interval writes heap dumps of the traced processes: it needs the backtrace option\n"},
		{"bad interval", []string{"--interval", "soon", "--", "true"}, 2, "mdtrace: invalid argument \"soon\" for \"--interval\" flag: time: invalid duration \"soon\"\nRun 'mdtrace --help' for usage.\n"},
		{"program with a command", []string{"--program", "x", "--", "true"}, 2, "mdtrace: --program traces the processes that run NAME from now on: give neither -p nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"program with -p", []string{"--program", "x", "-p", "1"}, 2, "mdtrace: --program traces the processes that run NAME from now on: give neither -p nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"empty program", []string{"--program", ""}, 2, "mdtrace: --program needs a program name\nRun 'mdtrace --help' for usage.\n"},
		{"program with a slash", []string{"--program", "bin/ls"}, 2, "mdtrace: --program \"bin/ls\": NAME is matched within file names, so it cannot hold a '/'\nRun 'mdtrace --help' for usage.\n"},
		{"program too long", []string{"--program", strings.Repeat("x", 64)}, 2, "mdtrace: --program NAME is at most 63 bytes long\nRun 'mdtrace --help' for usage.\n"},
		{"program with follow-forks", []string{"--program", "x", "--follow-forks"}, 2, "mdtrace: --follow-forks is for -p: with --program, children are always traced\nRun 'mdtrace --help' for usage.\n"},
		{"program with a shim option", []string{"--program", "x", "-o", "backtrace fill"}, 2, "mdtrace: option fill rewrites memory through the preloaded shim: it needs a command launched by mdtrace, not --program\n"},
		{"all with program", []string{"--all", "--program", "x"}, 2, "mdtrace: --all audits every process: give neither -p, --program nor a command\nRun 'mdtrace --help' for usage.\n"},
		{"negative top", []string{"--top", "-1", "--", "true"}, 2, "mdtrace: invalid --top -1\nRun 'mdtrace --help' for usage.\n"},
		{"top with all", []string{"--all", "--top", "5"}, 2, "mdtrace: --top is for traced processes: --all prints its own summary\nRun 'mdtrace --help' for usage.\n"},
		{"top without backtrace", []string{"--top", "5", "-o", "leak_track", "--", "true"}, 2, "mdtrace: --top lists allocation sites by their backtraces: it needs the backtrace option\n"},
		{"max-allocs too large", []string{"--max-allocs", "134217729", "--", "true"}, 2, "mdtrace: --max-allocs is at most 134217728, a live table of 5.2 GB\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes too large", []string{"--sample-bytes", "1099511627777", "--", "true"}, 2, "mdtrace: --sample-bytes 1099511627777 is over the most, 1099511627776 (1 TiB)\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes not a number", []string{"--sample-bytes", "-5", "--", "true"}, 2, "mdtrace: invalid argument \"-5\" for \"--sample-bytes\" flag: strconv.ParseUint: parsing \"-5\": invalid syntax\nRun 'mdtrace --help' for usage.\n"},
		{"sample-bytes with record_allocs", []string{"--sample-bytes", "4096", "-o", "record_allocs", "--", "true"}, 2, "mdtrace: option record_allocs needs every allocator call: it cannot be used with --sample-bytes\n"},
		{"sample-bytes with verify_pointers", []string{"--sample-bytes", "4096", "-o", "backtrace verify_pointers", "--", "true"}, 2, "mdtrace: option verify_pointers needs every allocator call: it cannot be used with --sample-bytes\n"},
		{"no-batch with -p", []string{"--no-batch", "-p", "1"}, 2, "mdtrace: --no-batch is about the shim preloaded into a launched command: not with -p, --program, --all or --no-preload\nRun 'mdtrace --help' for usage.\n"},
		{"no-batch without the shim", []string{"--no-batch", "--no-preload", "--", "true"}, 2, "mdtrace: --no-batch is about the shim preloaded into a launched command: not with -p, --program, --all or --no-preload\nRun 'mdtrace --help' for usage.\n"},
		{"unreachable-only without leak_track", []string{"--unreachable-only", "-o", "backtrace", "--", "true"}, 2, "mdtrace: --unreachable-only is about the leak report at exit: it needs the leak_track option\n"},
		{"max-leaks without leak_track", []string{"--max-leaks", "10", "-o", "backtrace", "--", "true"}, 2, "mdtrace: --max-leaks is about the leak report at exit: it needs the leak_track option\n"},
		{"max-leaks not a number", []string{"--max-leaks", "x", "-o", "leak_track", "--", "true"}, 2, "mdtrace: invalid argument \"x\" for \"--max-leaks\" flag: strconv.ParseUint: parsing \"x\": invalid syntax\nRun 'mdtrace --help' for usage.\n"},
		{"unreachable-first without leak_track", []string{"--unreachable-first", "-o", "backtrace", "--", "true"}, 2, "mdtrace: --unreachable-first is about the leak report at exit: it needs the leak_track option\n"},
		{"unreachable-first and -only", []string{"--unreachable-first", "--unreachable-only", "--", "true"}, 2, "mdtrace: --unreachable-first and --unreachable-only: choose one (the second leaves the reachable blocks out)\n"},
		{"unreachable-contents without the signal", []string{"--unreachable-contents", "--", "true"}, 2, "mdtrace: --unreachable-contents is about the checks of signal 48: it needs the check_unreachable_on_signal option (mdtrace unreachable --contents asks for a check with contents)\n"},
		{"log in a missing directory", []string{"--log", dir + "/no/such/log", "--", "true"}, 1, ""},
	}
	// kthreadd is PID 2 where mdtrace sees the host's PIDs.
	if comm, _ := os.ReadFile("/proc/2/comm"); string(comm) == "kthreadd\n" {
		cases = append(cases, badCase{"kernel thread", []string{"-p", "2"}, 1, "mdtrace: process 2 is a kernel thread: it has no program or allocator to trace\n"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runMdtrace(t, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit status %d, want %d", r.code, tc.code)
			}
			if tc.stderr != "" && r.stderr != tc.stderr {
				t.Errorf("stderr:\n%q\nwant:\n%q", r.stderr, tc.stderr)
			}
			if tc.stderr == "" && !strings.HasPrefix(r.stderr, "mdtrace: opening the log: creating "+dir+"/no/such/log: ") {
				t.Errorf("stderr: %q", r.stderr)
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine") {
				t.Errorf("mdtrace panicked:\n%s", r.stderr)
			}
		})
	}
}

func TestNotRoot(t *testing.T) {
	needRoot(t)
	cmd := exec.Command(mdtraceBin, "--", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.CombinedOutput()
	want := "mdtrace: needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (missing CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE); try sudo\n"
	if string(out) != want || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("as nobody: status %d, output %q, want 1 and %q", cmd.ProcessState.ExitCode(), out, want)
	}
}

func TestVersionAndHelp(t *testing.T) {
	r := runMdtrace(t, "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "mdtrace ") {
		t.Errorf("--version: %d %q", r.code, r.stdout)
	}
	// Help goes to standard output, for a pager.
	for _, arg := range []string{"-h", "--help"} {
		r = runMdtrace(t, arg)
		if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "--backtrace-dump-prefix") || r.stderr != "" {
			t.Errorf("%s: %d\n%s\nstderr: %s", arg, r.code, r.stdout, r.stderr)
		}
	}
}

func TestLogFileIsSafe(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep me\n"), 0o644)
	logPath := filepath.Join(dir, "log")
	os.Symlink(victim, logPath)
	cmd := exec.Command(mdtraceBin, "--leak-track", "--log", logPath, "--", prog("leaky"))
	cmd.Env = append(os.Environ(), "SUDO_UID=4242", "SUDO_GID=4343")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := readFile(t, victim); got != "keep me\n" {
		t.Errorf("the symlink's target was written: %q", got)
	}
	fi, err := os.Lstat(logPath)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the log is not a regular file: %v %v", fi.Mode(), err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 4242 || st.Gid != 4343 {
		t.Errorf("log owned by %d:%d, want 4242:4343", st.Uid, st.Gid)
	}
}

// TestOutputFilesPrivate: the log, heap dumps, record_allocs files and
// --folded hold heap addresses and memory maps of a process traced as
// root: they are 0600 unless --file-mode asks otherwise. A bad mode, and a
// log path that is a block device, are refused with an error.
func TestOutputFilesPrivate(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		flags []string
		want  os.FileMode
	}{
		{nil, 0o600},
		{[]string{"--file-mode", "0640"}, 0o640},
	} {
		dir := t.TempDir()
		args := append(tc.flags, "--log", dir+"/log", "--folded", dir+"/folded", "-o",
			"backtrace leak_track backtrace_dump_on_exit backtrace_dump_prefix="+dir+"/dump record_allocs record_allocs_on_exit record_allocs_file="+dir+"/rec",
			"--", prog("leaky"))
		r := runMdtrace(t, args...)
		if r.code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
		}
		files, _ := filepath.Glob(dir + "/*")
		if len(files) != 4 {
			t.Fatalf("files written: %v, want log, folded, a dump and a record file", files)
		}
		for _, f := range files {
			fi, err := os.Lstat(f)
			if err != nil || fi.Mode() != tc.want {
				t.Errorf("%s %v: mode %v, want %v (%v)", tc.flags, filepath.Base(f), fi.Mode(), tc.want, err)
			}
		}
	}
	r := runMdtrace(t, "--file-mode", "0999", "--", prog("leaky"))
	if want := "mdtrace: invalid --file-mode \"0999\": permissions in octal, such as 0600 or 0644\n"; r.code != 2 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("--file-mode 0999: exit %d, stderr %q, want 2 and %q", r.code, r.stderr, want)
	}
	blk := filepath.Join(t.TempDir(), "blk")
	if err := syscall.Mknod(blk, syscall.S_IFBLK|0o600, 7<<8); err != nil {
		t.Fatal(err)
	}
	r = runMdtrace(t, "--log", blk, "--", prog("leaky"))
	if want := "mdtrace: opening the log: creating " + blk + ": not a regular file: a block device\n"; r.code != 1 || r.stderr != want {
		t.Errorf("--log on a block device: exit %d, stderr %q, want 1 and %q", r.code, r.stderr, want)
	}
	if fi, err := os.Lstat(blk); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Errorf("the block device was replaced: %v %v", fi.Mode(), err)
	}
}
