//go:build linux && amd64

package tracer

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/internal/fixture"
	"github.com/mdtrace/mdtrace/stacks"
)

// startSaying starts the program at path with args and pipes to its
// standard input and from its standard output, and waits for its first
// line, want; the program is killed when the test ends.
func startSaying(t *testing.T, path, want string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd, stdin, out := startPiped(t, path, args...)
	if line, _ := out.ReadString('\n'); line != want+"\n" {
		t.Fatalf("%s said %q, want %s", filepath.Base(path), line, want)
	}
	return cmd, stdin, out
}

// startPiped starts the program at path with args and pipes to its
// standard input and from its standard output; the program is killed when
// the test ends.
func startPiped(t *testing.T, path string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(path, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, stdin, bufio.NewReader(stdout)
}

// TestRemoteCallLeft: a call that does not return in time (dlopen, waiting
// for the loader's lock that another thread holds) is left to return by
// itself: InjectLoad says so and lets the thread go, and once the lock is
// let go the thread comes back through the frame mdtrace wrote, to its
// pthread_join, its signal stack and mask as they were.
func TestRemoteCallLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	testProg(t, "libslowload.so")
	cmd, stdin, out := startSaying(t, testProg(t, "slowload"), "loading")
	defer func(d time.Duration) { injectCallWait = d }(injectCallWait)
	injectCallWait = 300 * time.Millisecond
	_, err := InjectLoad(cmd.Process.Pid, shim, true, 16, 0, nil)
	if !errors.Is(err, errCallLeft) || !strings.Contains(err.Error(), "calling dlopen in thread ") {
		t.Fatalf("InjectLoad: %v; want a dlopen left to return by itself", err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil || !strings.Contains(string(status), "\nTracerPid:\t0\n") {
		t.Errorf("slowload's status once InjectLoad returned (%v):\n%s\nwant TracerPid 0", err, status)
	}
	fmt.Fprintln(stdin, "go")
	if line, _ := out.ReadString('\n'); line != "joined altstack ok mask ok\n" {
		t.Fatalf("slowload said %q, want %q", line, "joined altstack ok mask ok\n")
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("slowload: %v", err)
	}
}

// TestIndexIn: the code is found wherever it lies, across the pieces read
// as well as inside them, and not where it is not.
func TestIndexIn(t *testing.T) {
	size := 3*(64<<10) + 100
	for _, at := range []int{0, 5, 64<<10 - 4, 64<<10 - len(restoreRTCode), 64 << 10, 2*(64<<10) - 1, size - len(restoreRTCode)} {
		b := make([]byte, size)
		copy(b[at:], restoreRTCode)
		if got, err := indexIn(bytes.NewReader(b), restoreRTCode); err != nil || got != int64(at) {
			t.Errorf("code at %d: found at %d (%v)", at, got, err)
		}
	}
	b := make([]byte, size)
	copy(b[size-len(restoreRTCode)+1:], restoreRTCode)
	if got, err := indexIn(bytes.NewReader(b), restoreRTCode); err != nil || got != -1 {
		t.Errorf("code cut off by the end: found at %d (%v), want -1", got, err)
	}
}

// TestReadRestoreRT: the offset found in the system's C library holds
// __restore_rt's code.
func TestReadRestoreRT(t *testing.T) {
	path := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no glibc to read: %v", err)
	}
	off, err := readRestoreRT(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := firstLoadAddress(f) + off
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && at >= p.Vaddr && at < p.Vaddr+p.Filesz {
			got := make([]byte, len(restoreRTCode))
			if _, err := p.ReadAt(got, int64(at-p.Vaddr)); err != nil || !bytes.Equal(got, restoreRTCode) {
				t.Fatalf("at %#x: %x (%v), want %x", at, got, err, restoreRTCode)
			}
			return
		}
	}
	t.Fatalf("offset %#x is in no segment of %s", off, path)
}

// TestRouteByWrites: the slots mdshim_inject_start lists are routed by
// mdtrace's writes (read-only pages included), as the shim's route would:
// each holds its hook, the shim's words say so, and the shim's give-back
// finds every one of them routed.
func TestRouteByWrites(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	cmd, stdin, _ := startSaying(t, testProg(t, "attachee"), "ready")
	in, err := InjectLoad(cmd.Process.Pid, shim, true, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := in.inStop(func(_ *Frozen, _ int, _ bool) error {
		n, err = in.routeByWrites()
		return err
	}); err != nil {
		t.Fatalf("routeByWrites: %v", err)
	}
	// attachee's slots of malloc, free, calloc, realloc and the loader's.
	if n == 0 || int(n) != in.Listed {
		t.Fatalf("%d slots routed, %d listed", n, in.Listed)
	}
	list := in.readWord(abi.SymbolInjectList)
	slots := make([]byte, in.Listed*abi.InjectSlotWords*8)
	if !readMem(in.PID, list, slots) {
		t.Fatal("the list cannot be read")
	}
	for i := range in.Listed {
		w := func(k int) uint64 { return binary.LittleEndian.Uint64(slots[(i*abi.InjectSlotWords+k)*8:]) }
		var cur [8]byte
		if !readMem(in.PID, w(abi.InjectSlotAddr), cur[:]) || binary.LittleEndian.Uint64(cur[:]) != w(abi.InjectSlotHook) {
			t.Errorf("slot %#x holds %#x, want its hook %#x", w(abi.InjectSlotAddr), binary.LittleEndian.Uint64(cur[:]), w(abi.InjectSlotHook))
		}
	}
	if r, s, u := in.readWord("mdshim_inject_routed"), in.readWord("mdshim_inject_slots"), in.readWord("mdshim_inject_unrouted"); r != 1 || s != n || u != 0 {
		t.Errorf("the shim's words: routed %d, slots %d, unrouted %d; want 1, %d, 0", r, s, u, n)
	}
	if back, err := in.Stop(); err != nil || back != int(n) {
		t.Errorf("the shim gave %d slots back (%v), want %d", back, err, n)
	}
	stdin.Close()
}

// TestReturnSignal: the signal that ends a call is one the process
// neither catches nor has pending, nor the thread blocks where it is
// pending through the call; none under seccomp.
func TestReturnSignal(t *testing.T) {
	status := func(cgt, pnd, shd, seccomp string) string {
		s := "Name:\tx\nSigPnd:\t" + pnd + "\nShdPnd:\t" + shd + "\nSigBlk:\tffffffffffffffff\nSigIgn:\t0000000000000000\nSigCgt:\t" + cgt + "\n"
		if seccomp != "" {
			s += "Seccomp:\t" + seccomp + "\n"
		}
		return s
	}
	const none, urg, winch = "0000000000000000", "0000000000400000", "0000000008000000"
	for _, tc := range []struct {
		what   string
		status string
		want   unix.Signal
	}{
		{"free", status(none, none, none, "0"), unix.SIGURG},
		{"no seccomp in the kernel", status(none, none, none, ""), unix.SIGURG},
		{"SIGURG caught", status(urg, none, none, "0"), unix.SIGWINCH},
		{"SIGURG pending for the thread", status(none, urg, none, "0"), unix.SIGWINCH},
		{"SIGURG pending for the process", status(none, none, urg, "0"), unix.SIGWINCH},
		{"both caught", status("0000000008400000", none, none, "0"), 0},
		{"SIGURG caught, SIGWINCH pending", status(urg, winch, none, "0"), 0},
		{"under seccomp", status(none, none, none, "2"), 0},
		{"a mask that does not parse", status("zz", none, none, "0"), 0},
		{"no masks", "Name:\tx\n", 0},
	} {
		if got := returnSignalOf(tc.status, 0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
	}
	// The signals of a mask passed over too.
	for _, tc := range []struct {
		avoid uint64
		want  unix.Signal
	}{{0, unix.SIGURG}, {1 << (unix.SIGURG - 1), unix.SIGWINCH}, {1<<(unix.SIGURG-1) | 1<<(unix.SIGWINCH-1), 0}, {^uint64(0) &^ (1 << (unix.SIGWINCH - 1)), unix.SIGWINCH}} {
		if got := returnSignalOf(status(none, none, none, "0"), tc.avoid); got != tc.want {
			t.Errorf("avoiding %#x: %v, want %v", tc.avoid, got, tc.want)
		}
	}
}

// TestRemoteCallSignalled: a call through the shim's stub runs without a
// stop at its system calls and ends in the stop of the signal the stub
// sends its thread, where its registers go back: it returns the function's
// result. Through the C library's stub, it ends in the stop of the signal
// sent before it, once the thread is back, after the handler of a signal
// of the program's pending meanwhile. The thread, stopped in its read,
// reads on. A call that does not return in time is left, and comes back
// through its frame with no one tracing it, its signal discarded and its
// vector registers whole.
func TestRemoteCallSignalled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	cmd, stdin, out := startSaying(t, testProg(t, "attachee"), "ready", "usr1")
	pid := cmd.Process.Pid
	in, err := InjectLoad(pid, shim, true, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if back := in.shimReturn(); back.signalled == 0 {
		t.Fatalf("the shim's stub is not the one mdtrace knows: %+v", back)
	}
	pf, err := filesOf(pid, in.Shim.Name)
	if err != nil {
		t.Fatal(err)
	}
	base := pf.libcBase()
	libc := func(name string) uint64 {
		at, err := moduleSymbol(pf.libcFile, base, name)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	var raise unix.Signal // sent to the thread before the call
	callThrough := func(back callReturn, fn uint64, args ...uint64) (ret uint64, sig unix.Signal, err error) {
		err = in.inStop(func(_ *Frozen, tid int, _ bool) error {
			saved, err := saveRegs(tid)
			if err != nil {
				return err
			}
			if raise != 0 {
				if err := unix.Tgkill(pid, tid, raise); err != nil {
					return err
				}
			}
			if ret, err = remoteCall(pid, tid, saved, back, fn, nil, args...); err != nil {
				return err
			}
			var si [128]byte
			if err := ptrace(unix.PTRACE_GETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&si[0]))); err != nil {
				return err
			}
			sig = unix.Signal(binary.LittleEndian.Uint32(si[:]))
			return nil
		})
		return ret, sig, err
	}
	call := func(fn uint64, args ...uint64) (uint64, unix.Signal, error) {
		return callThrough(in.shimReturn(), fn, args...)
	}
	ret, sig, err := call(libc("getpid"))
	if err != nil || ret != uint64(pid) || sig != unix.SIGURG {
		t.Fatalf("getpid through the stub: %d, stopped by %v (%v); want %d, stopped by SIGURG", ret, sig, err, pid)
	}
	// Through the C library's __restore_rt, as dlopen returns, the signal
	// sent before the call stops the thread once it is back.
	restoreRT := libcReturn(pf.libcFile.Path, base)
	if restoreRT.at == 0 {
		t.Fatal("no __restore_rt in the C library")
	}
	if _, sig, err := callThrough(restoreRT, libc("getpid")); err != nil || sig != unix.SIGURG {
		t.Fatalf("getpid through __restore_rt: stopped by %v (%v); want SIGURG", sig, err)
	}
	// A signal of the program's, pending through the call, comes first
	// as the thread is back: its handler runs once, where the thread was.
	raise = unix.SIGUSR1
	if _, sig, err := callThrough(restoreRT, libc("getpid")); err != nil || sig != unix.SIGURG {
		t.Fatalf("getpid through __restore_rt, SIGUSR1 pending: stopped by %v (%v); want SIGURG", sig, err)
	}
	raise = 0
	defer func(d time.Duration) { injectCallWait = d }(injectCallWait)
	injectCallWait = 100 * time.Millisecond
	if _, _, err := call(libc("usleep"), 300000); !errors.Is(err, errCallLeft) {
		t.Fatalf("usleep(0.3 s) with 0.1 s to return: %v; want the call left", err)
	}
	time.Sleep(400 * time.Millisecond)
	fmt.Fprintln(stdin, "go")
	// Its vector registers too: the frame of the call left has the
	// process's size of vector state, which rt_sigreturn takes whole.
	want := "done usr1 1 ymm ok\n"
	if !cpu.X86.HasAVX {
		want = "done usr1 1 ymm none\n"
	}
	if line, _ := out.ReadString('\n'); line != want {
		t.Fatalf("attachee said %q after the calls, want %q", line, want)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("attachee: %v", err)
	}
}

// TestInjectModuleUnloaded: a module unloaded after the shim listed its
// slots (dlfork's plugin) is passed over wherever the shim goes through its
// list: a fork child gives the calls back (sampling on) and runs on, and
// the give-back at the end restores the slots that are left. They read the
// unloaded module's slot before, and died of a SIGSEGV.
func TestInjectModuleUnloaded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	pid, say, end := startDlfork(t)
	in, err := InjectLoad(pid, shim, true, 0, 4096, nil)
	if err != nil {
		t.Fatal(err)
	}
	routed, unrouted, _, err := in.Route(func() {})
	if err != nil || routed == 0 || unrouted != 0 {
		t.Fatalf("Route: %d routed, %d unrouted (%v)", routed, unrouted, err)
	}
	say("closed")
	say("child 7")
	// Nothing probes the shim's sites here: an allocation the parent
	// samples (rare: once in a CI run) finds them unprobed, and
	// the shim gives the calls back by itself, through the same list.
	want := routed - 1
	if in.readWord("mdshim_inject_routed") == 0 {
		want = 0
	}
	back, err := in.Stop()
	if err != nil || back != want {
		t.Errorf("the shim gave %d slots back (%v), want %d (all but the plugin's, none if it gave them back itself)", back, err, want)
	}
	end()
}

// startDlfork starts dlfork (and its plugin) for a test: say sends it a
// line and checks the line it answers, end closes its input and checks
// that it exits with 0.
func startDlfork(t *testing.T) (pid int, say func(want string), end func()) {
	t.Helper()
	testProg(t, "libplugin.so")
	cmd, stdin, out := startSaying(t, testProg(t, "dlfork"), "ready")
	say = func(want string) {
		t.Helper()
		fmt.Fprintln(stdin)
		if line, _ := out.ReadString('\n'); line != want+"\n" {
			t.Fatalf("dlfork said %q, want %q", line, want)
		}
	}
	end = func() {
		t.Helper()
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("dlfork: %v", err)
		}
	}
	return cmd.Process.Pid, say, end
}

// TestInjectEarlyForkChild: a process injected again as --all --inject
// does, its hand-overs held until mdtrace says ready, forks before that:
// its child, which mdtrace does not follow and nobody will say ready to,
// runs on at once. It waited 30 s in its fork handler before (handing
// over the batch its thread kept from the first injection), for as long
// as mdtrace lived.
func TestInjectEarlyForkChild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	pid, say, end := startDlfork(t)
	// Routed, its thread makes its batch (it allocates and frees a block;
	// held, as mdtrace is not ready, where no probe would take it), and
	// is given back.
	in, err := InjectLoad(pid, shim, true, 0, 0, &AuditHooks{Early: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := in.Route(func() {}); err != nil {
		t.Fatal(err)
	}
	say("closed")
	if _, err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	if in, err = InjectLoad(pid, shim, true, 0, 4096, &AuditHooks{Early: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	say("child 7")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the fork child took %v", d)
	}
	if _, err := in.Stop(); err != nil {
		t.Errorf("giving the process back: %v", err)
	}
	end()
}

// TestSameCode: the C library is where the maps said while the stub's code
// is there; an address from another mapping of it (a program executed
// since) is not taken for it.
func TestSameCode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read another process's memory")
	}
	cmd, _, _ := startSaying(t, testProg(t, "attachee"), "ready")
	pid := cmd.Process.Pid
	pf, err := filesOf(pid, "/nonexistent/libmdshim.so")
	if err != nil {
		t.Fatal(err)
	}
	base := pf.libcBase()
	dlopenAt, err := moduleSymbol(pf.libcFile, base, "dlopen")
	if err != nil {
		t.Fatal(err)
	}
	back := libcReturn(pf.libcFile.Path, base)
	if back.at == 0 {
		t.Fatal("no __restore_rt in the C library")
	}
	if !sameCode(pid, back, dlopenAt) {
		t.Errorf("sameCode: false where the maps put the library")
	}
	moved := back
	moved.at += 0x1000
	if sameCode(pid, moved, dlopenAt) {
		t.Errorf("sameCode: true with __restore_rt's address a page off")
	}
	if sameCode(pid, back, 0x1000) || sameCode(pid, callReturn{}, 0x1000) {
		t.Errorf("sameCode: true with dlopen at an address nothing maps")
	}
}

// TestRemoteCallAMX: a thread with AMX's tile data in use gets it back
// whole, from the stop where mdtrace puts its state back (the injection's
// calls) and from the frame it returns through by itself (a call left):
// the frame has the process's larger state then, the tile data in it.
func TestRemoteCallAMX(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	cmd, stdin, out := startPiped(t, testProg(t, "amxwait"))
	switch line, _ := out.ReadString('\n'); {
	case strings.HasPrefix(line, "no amx: "):
		cmd.Wait()
		t.Skip(strings.TrimSpace(line))
	case line != "ready\n":
		t.Fatalf("amxwait said %q, want ready", line)
	}
	pid := cmd.Process.Pid
	in, err := InjectLoad(pid, shim, true, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := filesOf(pid, in.Shim.Name)
	if err != nil {
		t.Fatal(err)
	}
	usleep, err := moduleSymbol(pf.libcFile, pf.libcBase(), "usleep")
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { injectCallWait = d }(injectCallWait)
	injectCallWait = 100 * time.Millisecond
	var inUse bool
	err = in.inStop(func(_ *Frozen, tid int, _ bool) error {
		saved, err := saveRegs(tid)
		if err != nil {
			return err
		}
		inUse = binary.LittleEndian.Uint64(saved.xstate[512:])&xsave().dynamic != 0
		_, err = remoteCall(pid, tid, saved, in.shimReturn(), usleep, nil, 300000)
		return err
	})
	if !inUse {
		t.Fatal("amxwait's thread has no tile data in use")
	}
	if !errors.Is(err, errCallLeft) {
		t.Fatalf("usleep(0.3 s) with 0.1 s to return: %v; want the call left", err)
	}
	time.Sleep(400 * time.Millisecond)
	fmt.Fprintln(stdin, "go")
	if line, _ := out.ReadString('\n'); line != "tile ok\n" {
		t.Fatalf("amxwait said %q after the calls, want tile ok", line)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("amxwait: %v", err)
	}
}

// TestInjectBypassPageTaken: the bypasses' blob, made before dlopen, is
// given to mdshim_inject_start; where the page it names is taken by then,
// the shim says so (-EEXIST), and InjectLoad makes the blob again and has
// mdshim_inject_bypass make the bypasses. A blob that bypasses no
// function leaves the allocator's functions as they are.
func TestInjectBypassPageTaken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	for _, taken := range []bool{false, true} {
		cmd, stdin, _ := startSaying(t, testProg(t, "attachee"), "ready")
		pid := cmd.Process.Pid
		// A blob naming page at, no function bypassed, one byte of code.
		blobAt := func(at uint64) []byte {
			b := binary.LittleEndian.AppendUint64(nil, at)
			for range bypassFuncs {
				b = binary.LittleEndian.AppendUint32(b, bypassNone)
			}
			return append(b, 0xcc)
		}
		made := 0
		in, err := InjectLoad(pid, shim, true, 0, 0, &AuditHooks{Bypass: func() ([]byte, error) {
			made++
			maps, err := stacks.ReadMaps(pid)
			if err != nil {
				return nil, err
			}
			if taken && made == 1 {
				// The program's own first page.
				return blobAt(maps.Mappings[0].Start), nil
			}
			at, ok := nearFreePage(maps, maps.Mappings[0].Start, maps.Mappings[0].End)
			if !ok {
				return nil, errors.New("no free page")
			}
			return blobAt(at), nil
		}})
		if err != nil {
			t.Fatalf("taken %v: %v", taken, err)
		}
		if want := map[bool]int{false: 1, true: 2}[taken]; made != want || in.Rebypassed != taken || in.Bypassed != 0 {
			t.Errorf("taken %v: the blob made %d times, made again %v, %d functions bypassed; want %d, %v, 0", taken, made, in.Rebypassed, in.Bypassed, want, taken)
		}
		if _, err := in.Stop(); err != nil {
			t.Errorf("taken %v: giving back: %v", taken, err)
		}
		stdin.Close()
		cmd.Wait()
	}
}

// TestInjectAdoptLeft: the blocks sampled before the route are left in the
// shim's adopt area, with ADOPT_PENDING set in its control word, in the
// route's stop without a call; the process's first call of the allocator
// through the hooks takes them and clears the bit.
func TestInjectAdoptLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	cmd, stdin, out := startSaying(t, testProg(t, "attachee"), "ready")
	in, err := InjectLoad(cmd.Process.Pid, shim, true, 0, 4096, &AuditHooks{})
	if err != nil {
		t.Fatal(err)
	}
	in.Adopt = func() ([]uint64, error) { return []uint64{0x100000, 0x200010, 0x300020}, nil }
	words := func() (pending uint32, count, failed uint64) {
		at, err := moduleSymbol(in.Shim, in.Base, abi.SymbolCtlPending)
		var w [4]byte
		if err != nil || !readMem(in.PID, at, w[:]) {
			t.Fatalf("reading %s: %v", abi.SymbolCtlPending, err)
		}
		return binary.LittleEndian.Uint32(w[:]), in.readWord(abi.SymbolAdoptCount), in.readWord(abi.SymbolAdoptFailed)
	}
	if _, _, _, err := in.Route(func() {}); err != nil {
		t.Fatal(err)
	}
	if p, n, f := words(); in.Adopted != 3 || p&abi.AdoptPending == 0 || n != 3 || f != 0 {
		t.Errorf("after the route: %d adopted, control word %#x, %d left, %d failed; want 3, the bit, 3, 0", in.Adopted, p, n, f)
	}
	io.WriteString(stdin, "go\n")
	if line, _ := out.ReadString('\n'); line != "done\n" {
		t.Fatalf("attachee said %q, want done", line)
	}
	if p, n, f := words(); p&abi.AdoptPending != 0 || n != 0 || f != 0 || in.AdoptFailed() != 0 {
		t.Errorf("after its calls: control word %#x, %d left, %d failed; want no bit, 0, 0", p, n, f)
	}
	if _, err := in.Stop(); err != nil {
		t.Errorf("giving back: %v", err)
	}
	stdin.Close()
	cmd.Wait()
}
