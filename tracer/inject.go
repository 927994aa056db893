//go:build linux && amd64

package tracer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/stacks"
)

// Injection (-p PID --inject): the shim is loaded into a running process
// by one of its threads, which mdtrace makes call dlopen and then the
// shim's mdshim_inject_start as a debugger calls a function: its registers
// saved, its stack pointer moved below the red zone, its return to a stub
// that puts the thread back by itself (remotecall.go), and its registers
// (the vector ones too) put back exactly once it has, orig_rax included,
// so that a system call it was in restarts as it would have. While it makes
// the call, the thread blocks every signal but the faults its own
// instructions raise: a signal sent meanwhile waits, and its handler runs
// where the thread was stopped, once its mask is put back, as if it had come
// a moment later. A handler run on top of the call would see the program in
// a state it never is in (inside dlopen, the loader's and the allocator's
// locks held), which a program that blocks its signals around its own
// calls of the allocator does not expect. The other
// threads run meanwhile: one of them may hold the loader's or the
// allocator's lock. Then, with every thread stopped, one of them calls
// mdshim_inject_route (shim/inject.c), which points the GOT slots of
// malloc and the others at the shim's hooks, and mdtrace takes its probes
// off the allocator in the same stop: no call is seen twice or missed.

// injectCallWait is how long a call made in the process may take (a
// variable for tests).
var injectCallWait = 10 * time.Second

// injectPickWait bounds the search for a thread that can make the calls.
const injectPickWait = 3 * time.Second

// ntX86Xstate is the register set of the x87, SSE and AVX registers.
const ntX86Xstate = 0x202

// rtldNow is dlfcn.h's RTLD_NOW.
const rtldNow = 2

// Injected is the shim loaded into a running process.
type Injected struct {
	PID int
	// Shim is the shim's file as the process maps it, Base the address
	// its first segment is mapped at.
	Shim stacks.File
	Base uint64
	// Listed is the count of GOT slots the shim found to route.
	Listed int
	// Pending is where the shim counts the allocations its batches
	// hold (0 without batches).
	Pending uint64
	// Bypassed counts the allocator's functions the shim calls through
	// bypasses of their probes (InjectLoad's AuditHooks).
	Bypassed int
	// Rebypassed tells that the bypasses' blob, made before dlopen, named
	// a page dlopen took, and was made again.
	Rebypassed bool
	// Adopt, if set, gives the blocks the probes sampled in the process
	// before its calls are routed: the shim reports their frees as it
	// does its own samples'. Route calls it with every thread stopped.
	Adopt func() ([]uint64, error)
	// Adopted counts the blocks the shim took from Adopt.
	Adopted int
	// Held is how long the injection has held the process: the thread
	// that loads and starts the shim stopped for it, every thread for the
	// route and the stops after.
	Held time.Duration
	path string
	stub int // whether the shim's return stub is shimStub: 1 yes, -1 no, 0 not read yet
}

// savedRegs are a stopped thread's registers and its mask of blocked
// signals.
type savedRegs struct {
	regs   unix.PtraceRegs
	xstate []byte
	mask   uint64
}

// faultSignals are the signals a thread making a call for mdtrace leaves
// unblocked: those its own instructions raise. The kernel gives a fault
// whose signal is blocked the default action, and resets its handler.
const faultSignals = 1<<(unix.SIGSEGV-1) | 1<<(unix.SIGBUS-1) | 1<<(unix.SIGILL-1) |
	1<<(unix.SIGFPE-1) | 1<<(unix.SIGTRAP-1) | 1<<(unix.SIGSYS-1)

// sigmaskSize is the size of the kernel's sigset_t, which PTRACE_GETSIGMASK
// and PTRACE_SETSIGMASK take as their address argument.
const sigmaskSize = 8

// sigmask reads (get) or sets the blocked signals of stopped thread tid.
// The kernel reads and sets the mask the thread has outside a system call
// that changed it for its duration (ppoll, sigsuspend): that call, when it
// restarts, changes it again.
func sigmask(tid int, get bool, mask *uint64) error {
	req := unix.PTRACE_SETSIGMASK
	if get {
		req = unix.PTRACE_GETSIGMASK
	}
	return ptrace(req, tid, sigmaskSize, uintptr(unsafe.Pointer(mask)))
}

func saveRegs(tid int) (*savedRegs, error) {
	// The kernel gives at most what the buffer holds, and takes back only
	// the whole: the buffer has room for more than the processor's
	// largest state (11008 bytes with AMX's tile data), so that a state
	// that fills it is known to be cut.
	s := &savedRegs{xstate: make([]byte, max(xsave().max, 4096)+64)}
	if err := unix.PtraceGetRegs(tid, &s.regs); err != nil {
		return nil, err
	}
	iov := unix.Iovec{Base: &s.xstate[0]}
	iov.SetLen(len(s.xstate))
	if err := ptrace(unix.PTRACE_GETREGSET, tid, ntX86Xstate, uintptr(unsafe.Pointer(&iov))); err != nil {
		return nil, err
	}
	if int(iov.Len) >= len(s.xstate) {
		return nil, fmt.Errorf("thread %d's vector state is larger than the processor says (%d bytes)", tid, xsave().max)
	}
	s.xstate = s.xstate[:iov.Len]
	if err := sigmask(tid, true, &s.mask); err != nil {
		return nil, err
	}
	return s, nil
}

// reread takes the state of thread tid as it is now, for what goes back.
func (s *savedRegs) reread(tid int) error {
	now, err := saveRegs(tid)
	if err != nil {
		return err
	}
	*s = *now
	return nil
}

func (s *savedRegs) restore(tid int) error {
	regs := s.regs
	if err := unix.PtraceSetRegs(tid, &regs); err != nil {
		return err
	}
	iov := unix.Iovec{Base: &s.xstate[0]}
	iov.SetLen(len(s.xstate))
	if err := ptrace(unix.PTRACE_SETREGSET, tid, ntX86Xstate, uintptr(unsafe.Pointer(&iov))); err != nil {
		return err
	}
	return sigmask(tid, false, &s.mask)
}

// writeMem writes data at addr of process pid.
func writeMem(pid int, addr uint64, data []byte) error {
	local := []unix.Iovec{{Base: &data[0]}}
	local[0].SetLen(len(data))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(data)}}
	n, err := unix.ProcessVMWritev(pid, local, remote, 0)
	if err == nil && n != len(data) {
		err = fmt.Errorf("short write at %#x", addr)
	}
	return err
}

// nap sleeps d on the calling OS thread, for the short waits of the
// tracer's loops (remote calls, seizures, freezes): time.Sleep's shortest
// sleeps took about 1 ms here (the runtime's timers), and each remote call
// of an injection waited 1.2 ms for a call of 0.1 ms.
func nap(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Nanosleep(&ts, nil)
}

// blockingSyscalls are system calls a thread waits in outside the
// allocator: a thread stopped in one of them inside the C library can
// make calls.
var blockingSyscalls = map[uint64]bool{
	unix.SYS_READ: true, unix.SYS_WRITE: true, unix.SYS_POLL: true, unix.SYS_PPOLL: true,
	unix.SYS_SELECT: true, unix.SYS_PSELECT6: true, unix.SYS_EPOLL_WAIT: true, unix.SYS_EPOLL_PWAIT: true,
	unix.SYS_NANOSLEEP: true, unix.SYS_CLOCK_NANOSLEEP: true, unix.SYS_WAIT4: true, unix.SYS_WAITID: true,
	unix.SYS_ACCEPT: true, unix.SYS_ACCEPT4: true, unix.SYS_RECVFROM: true, unix.SYS_RECVMSG: true,
	unix.SYS_PAUSE: true, unix.SYS_RT_SIGSUSPEND: true, unix.SYS_RT_SIGTIMEDWAIT: true, unix.SYS_FUTEX: true,
	unix.SYS_READV: true, unix.SYS_WRITEV: true, unix.SYS_SENDTO: true, unix.SYS_SENDMSG: true,
}

// processFiles are the process's C library, loader and shim mappings, and
// the file that defines dlopen.
type processFiles struct {
	libc, loader, shim []stacks.Mapping
	libcFile           stacks.File
	// entries are the C library's allocator functions, where they are in
	// the process (atAllocatorEntry), found once.
	entries     []allocEntry
	entriesRead bool
}

// filesOf reads process pid's mappings of the C library, the loader and
// the shim, the file the process sees at the path shim.
func filesOf(pid int, shim string) (*processFiles, error) {
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, ErrProcessGone)
	}
	pf := &processFiles{}
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		base := filepath.Base(m.Path)
		switch {
		case stacks.IsLibc(base):
			pf.libc = append(pf.libc, *m)
			if m.Offset == 0 && pf.libcFile.Path == "" {
				pf.libcFile = stacks.MappedFile(pid, m)
			}
		case strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld.so"):
			pf.loader = append(pf.loader, *m)
		case shim != "" && m.Name() == shim:
			pf.shim = append(pf.shim, *m)
		}
	}
	if pf.libcFile.Path == "" {
		return nil, fmt.Errorf("process %d maps no C library (libc.so): --inject needs glibc's dlopen", pid)
	}
	return pf, nil
}

func inMappings(ms []stacks.Mapping, pc uint64) bool {
	for _, m := range ms {
		if pc >= m.Start && pc < m.End {
			return true
		}
	}
	return false
}

// canCall reports whether a thread stopped with regs can make calls: not
// inside the loader, and inside the C library only while it waits in a
// system call that the allocator does not make.
func (pf *processFiles) canCall(regs *unix.PtraceRegs) bool {
	if inMappings(pf.loader, regs.Rip) || inMappings(pf.shim, regs.Rip) {
		return false
	}
	if !inMappings(pf.libc, regs.Rip) {
		return true
	}
	return int64(regs.Orig_rax) >= 0 && blockingSyscalls[regs.Orig_rax]
}

// moduleSymbol returns the address of symbol name of the file f in
// process pid, mapped from base.
func moduleSymbol(f stacks.File, base uint64, name string) (uint64, error) {
	off, err := symbolAddress(f.Path, name)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", f.Name, err)
	}
	return base + off, nil
}

// ShimGivenBack reports whether process pid maps the shim at path (the
// same file) and that shim was given back: loaded by an mdtrace's
// --inject, its calls given back to the allocator since, it can be started
// again. A shim in use (routing, or the allocator of a process launched
// by mdtrace, which has no such word set) is not.
func ShimGivenBack(pid int, path string) bool {
	want, err := os.Stat(path)
	if err != nil {
		return false
	}
	f, base, ok := mappedAt(pid, want)
	if !ok {
		return false
	}
	in := &Injected{PID: pid, Shim: f, Base: base}
	// Listed slots (mdshim_inject_start ran) and none routed now.
	return in.readWordOK("mdshim_inject_routed") == 0 && in.readWordOK("mdshim_inject_pending") != 0
}

// mappedAt returns the base of the file like want that process pid maps.
func mappedAt(pid int, want os.FileInfo) (stacks.File, uint64, bool) {
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return stacks.File{}, 0, false
	}
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		if m.Offset != 0 || m.Path == "" || m.Path[0] != '/' {
			continue
		}
		f := stacks.MappedFile(pid, m)
		if fi, err := os.Stat(f.Path); err == nil && os.SameFile(fi, want) {
			return f, m.Start, true
		}
	}
	return stacks.File{}, 0, false
}

// onTracerThread runs fn on an OS thread of its own, which stays locked:
// it becomes the tracer of the threads fn seizes, and dies with them
// detached.
func onTracerThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- fn()
	}()
	return <-done
}

// seizeStopped seizes thread tid and waits for its stop; ok is false when
// it is gone, cannot be traced, or stopped for a signal (then let go with
// it).
func seizeStopped(tid int) bool {
	if ptrace(unix.PTRACE_SEIZE, tid, 0, callOptions) != nil {
		return false
	}
	if ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0) != nil {
		return false
	}
	deadline := time.Now().Add(freezeWait)
	for {
		var ws unix.WaitStatus
		wpid, err := wait4(tid, &ws, unix.WALL|unix.WNOHANG)
		switch {
		case err != nil || wpid == tid && (ws.Exited() || ws.Signaled()):
			return false
		case wpid == tid && ws.Stopped():
			if int(ws>>16)&0xff == 0 {
				ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(ws.StopSignal()))
				return false
			}
			return true
		}
		if time.Now().After(deadline) {
			// It stops later, and is let go then, by the wait below.
			go func() {
				runtime.LockOSThread()
				var ws unix.WaitStatus
				wait4(tid, &ws, unix.WALL)
				ptrace(unix.PTRACE_DETACH, tid, 0, 0)
			}()
			return false
		}
		nap(50 * time.Microsecond)
	}
}

// AuditHooks are what --all --inject adds to an injection: there the
// probes on the allocator have no PID filter, and see the process's calls
// whoever makes them.
type AuditHooks struct {
	// Bypass makes the bypasses of the allocator's probes (Probes.Bypass),
	// once the shim is in: it takes a free page from the process's maps.
	Bypass func() ([]byte, error)
	// Quiet passes over the allocator calls of thread tid while on: those
	// the injection makes it make, the loader's for the shim among them
	// (Probes.Quiet).
	Quiet func(tid int, on bool)
	// Early has the shim hold its batches until Injected.Ready says the
	// probes on its sites are live (the calls may be routed before).
	Early bool
}

// InjectLoad loads the shim at path (mdtrace's own copy) into process pid
// and sets it up, with batches of depth frames an allocation when batch is
// set, or sampling one allocation every sample bytes on average when
// sample is not 0, and, with audit, the allocator's functions called
// through the bypasses it makes. The path must name the same file in the
// process's root. On an error the process is left running as it was (a
// shim loaded stays loaded, unrouted).
func InjectLoad(pid int, path string, batch bool, depth int, sample uint64, audit *AuditHooks) (*Injected, error) {
	want, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if there, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid, path)); err != nil || !os.SameFile(there, want) {
		return nil, fmt.Errorf("process %d does not see the shim at %s (another root or mount namespace): --inject needs the same file there", pid, path)
	}
	// The process's maps name the shim by its path without links (a shim
	// given back by an earlier mdtrace is mapped already).
	named := path
	if p, err := filepath.EvalSymlinks(path); err == nil {
		named = p
	}
	pf, err := filesOf(pid, named)
	if err != nil {
		return nil, err
	}
	libcBase := pf.libcBase()
	dlopenAt, err := moduleSymbol(pf.libcFile, libcBase, "dlopen")
	if err != nil {
		return nil, fmt.Errorf("--inject needs glibc 2.34 or later, whose C library defines dlopen: %w", err)
	}
	dlerrorAt, err := moduleSymbol(pf.libcFile, libcBase, "dlerror")
	if err != nil {
		return nil, err
	}
	// dlopen returns through the C library's __restore_rt, which does not
	// keep its result: the shim's mapping tells. Found before a thread is
	// stopped: the first time, the library's text is searched for it.
	back := libcReturn(pf.libcFile.Path, libcBase)
	// The shim's symbols an injection looks up, cold the first time, are
	// read before the thread is stopped.
	for _, name := range injectSymbols {
		symbolAddress(path, name)
	}
	// The bypasses' blob is made before the thread is stopped, from the
	// maps before dlopen (0.1 to 0.9 ms here, held before), and given to
	// mdshim_inject_start: one call less in the stop. A page it names
	// that dlopen took meanwhile is found by the shim's mmap
	// (MAP_FIXED_NOREPLACE), and the blob made again.
	var blob []byte
	if audit != nil && audit.Bypass != nil {
		if blob, err = audit.Bypass(); err != nil {
			return nil, err
		}
	}
	in := &Injected{PID: pid, path: path}
	err = onTracerThread(func() error {
		tid, err := pickThread(pid, pf)
		if err != nil {
			return err
		}
		defer ptrace(unix.PTRACE_DETACH, tid, 0, 0)
		held := time.Now()
		defer func() { in.Held += time.Since(held) }()
		if !sameCode(pid, back, dlopenAt) {
			return ErrExecuted
		}
		saved, err := saveRegs(tid)
		if err != nil {
			return fmt.Errorf("reading thread %d's registers: %w", tid, err)
		}
		if audit != nil && audit.Quiet != nil {
			audit.Quiet(tid, true)
			defer audit.Quiet(tid, false)
		}
		h, err := remoteCall(pid, tid, saved, back, dlopenAt, append([]byte(path), 0), rtldNow)
		if err != nil {
			return fmt.Errorf("calling dlopen in thread %d: %w", tid, err)
		}
		f, base, ok := mappedAt(pid, want)
		if back.at == 0 && h == 0 || !ok {
			msg := "no reason given"
			if e, err := remoteCall(pid, tid, saved, callReturn{}, dlerrorAt, nil); err == nil && e != 0 {
				msg = remoteCString(pid, e)
			}
			return fmt.Errorf("the process's dlopen refused the shim: %s", msg)
		}
		in.Shim, in.Base = f, base
		start, err := moduleSymbol(f, base, "mdshim_inject_start")
		if err != nil {
			return fmt.Errorf("%s has no mdshim_inject_start: an older shim than mdtrace", path)
		}
		var b uint64
		if batch {
			b = 1
		}
		var early uint64
		if audit != nil && audit.Early && batch {
			// The shim looks for mdtrace by its pid while it waits:
			// none where the process sees other pids.
			early = ^uint64(0)
			if samePIDNamespace(pid) {
				early = uint64(os.Getpid())
			}
		}
		args := []uint64{b, uint64(depth), sample, early}
		if blob != nil {
			args = append([]uint64{uint64(len(blob))}, args...)
		} else {
			args = append([]uint64{0, 0}, args...)
		}
		n, err := remoteCall(pid, tid, saved, in.shimReturn(), start, blob, args...)
		if err != nil {
			return fmt.Errorf("calling mdshim_inject_start in thread %d: %w", tid, err)
		}
		if int64(n) < 0 {
			return fmt.Errorf("the shim could not start in the process: %v", unix.Errno(-int64(n)))
		}
		in.Listed = int(n)
		if blob != nil {
			n := in.readWord(abi.SymbolInjectBypassed)
			if int64(n) == -int64(unix.EEXIST) {
				// dlopen mapped the page the blob names.
				if n, err = in.bypassAgain(tid, audit); err != nil {
					return err
				}
				in.Rebypassed = true
			}
			if int64(n) < 0 {
				return fmt.Errorf("the shim could not make the bypasses of the allocator's probes: %v", unix.Errno(-int64(n)))
			}
			if want := Bypassed(blob); int(n) != want {
				return fmt.Errorf("the shim made %d of the %d bypasses of the allocator's probes", n, want)
			}
			in.Bypassed = int(n)
		}
		if batch {
			in.Pending = in.readWord("mdshim_inject_pending")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// injectSymbols are the shim's symbols an injection may look up with the
// process stopped: each lookup of a name reads the shim's file the first
// time (100 µs or so).
var injectSymbols = []string{
	"mdshim_inject_start", "mdshim_inject_return", "mdshim_inject_bypass", "mdshim_inject_route",
	"mdshim_inject_stop", "mdshim_sample_adopt", "mdshim_inject_pending", "mdshim_inject_routed",
	"mdshim_inject_slots", "mdshim_inject_unrouted", abi.SymbolInjectBypassed, abi.SymbolInjectList,
	abi.SymbolInjectDropped, abi.SymbolAdoptArea, abi.SymbolAdoptCount, abi.SymbolAdoptFailed,
	abi.SymbolCtlPending, abi.SymbolReady,
}

// bypassAgain makes the bypasses' blob again, from the maps as they are
// now, and has thread tid, stopped, make them: where the page the first
// blob named was taken by dlopen. It returns what mdshim_inject_bypass
// returned.
func (in *Injected) bypassAgain(tid int, audit *AuditHooks) (uint64, error) {
	blob, err := audit.Bypass()
	if err != nil {
		return 0, err
	}
	n, err := in.callAs(tid, "mdshim_inject_bypass", blob, uint64(len(blob)))
	if err != nil {
		return 0, fmt.Errorf("calling mdshim_inject_bypass in thread %d: %w", tid, err)
	}
	return n, nil
}

// libcBase is the address the C library's first segment is mapped at.
func (pf *processFiles) libcBase() uint64 {
	for _, m := range pf.libc {
		if m.Offset == 0 {
			return m.Start
		}
	}
	return pf.libc[0].Start
}

// ErrExecuted is InjectLoad's error for a process that executed another
// program between the reading of its maps and the stop of a thread.
var ErrExecuted = fmt.Errorf("it executed another program meanwhile: %w", ErrProcessGone)

// sameCode reports whether process pid still maps the C library where its
// maps said, with dlopen at dlopenAt: the code of the stub back (glibc's
// __restore_rt) is there, or, without one, dlopen's first byte can be
// read. A process that executed another program since maps its library
// elsewhere, where calling the old address would fault, or worse.
func sameCode(pid int, back callReturn, dlopenAt uint64) bool {
	var b [1]byte
	if !readMem(pid, dlopenAt, b[:]) {
		return false
	}
	if back.at == 0 {
		return true
	}
	code := make([]byte, len(restoreRTCode))
	return readMem(pid, back.at, code) && bytes.Equal(code, restoreRTCode)
}

// remoteCString reads a NUL-terminated string of up to 512 bytes at addr.
func remoteCString(pid int, addr uint64) string {
	buf := make([]byte, 512)
	for n := len(buf); n >= 16; n /= 2 {
		if readMem(pid, addr, buf[:n]) {
			s := string(buf[:n])
			if i := strings.IndexByte(s, 0); i >= 0 {
				s = s[:i]
			}
			return s
		}
	}
	return "(unreadable)"
}

// pickThread seizes a thread of pid that can make calls, letting the
// process run a moment between tries; the thread is left stopped.
func pickThread(pid int, pf *processFiles) (int, error) {
	deadline := time.Now().Add(injectPickWait)
	for {
		tids, err := tasks(pid)
		if err != nil {
			return 0, fmt.Errorf("process %d: %w", pid, ErrProcessGone)
		}
		for _, tid := range tids {
			if !seizeStopped(tid) {
				continue
			}
			var regs unix.PtraceRegs
			if unix.PtraceGetRegs(tid, &regs) == nil && (pf.canCall(&regs) || pf.atAllocatorEntry(pid, tid, &regs)) {
				return tid, nil
			}
			ptrace(unix.PTRACE_DETACH, tid, 0, 0)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no thread of process %d stopped outside the allocator and the loader within %s", pid, injectPickWait)
		}
		// A busy thread is mostly inside the allocator, its probes'
		// traps included: the next tries come soon.
		nap(500 * time.Microsecond)
	}
}

// ErrInjectNoThread is returned when no thread stopped where it could
// make a call, in every stop tried.
var ErrInjectNoThread = errors.New("no thread stopped where it could call the shim")

// errNoCaller is a stop in which no thread could make a call.
var errNoCaller = errors.New("no thread can make the call in this stop")

// caller returns a frozen thread that can call the shim's functions: one
// stopped where the program itself could make a call (canCall: not in the
// loader or the shim, in the C library only in a system call it waits in),
// or at the start of an allocator function the program called. A thread
// stopped elsewhere may hold a lock those functions take: the shim's fork
// handlers hold its locks across a fork(), and a process that forks all
// the time (a shell) is often frozen inside one.
func (in *Injected) caller(fz *Frozen, pf *processFiles) (int, bool) {
	for _, t := range fz.Threads {
		var regs unix.PtraceRegs
		if unix.PtraceGetRegs(t.TID, &regs) != nil {
			continue
		}
		if pf.canCall(&regs) || pf.atAllocatorEntry(in.PID, t.TID, &regs) {
			return t.TID, true
		}
	}
	return 0, false
}

// callAs makes frozen thread tid call the shim's function name, with data
// and args as remoteCall passes them, and returns its result.
func (in *Injected) callAs(tid int, name string, data []byte, args ...uint64) (uint64, error) {
	fn, err := moduleSymbol(in.Shim, in.Base, name)
	if err != nil {
		return 0, err
	}
	saved, err := saveRegs(tid)
	if err != nil {
		return 0, fmt.Errorf("reading thread %d's registers: %w", tid, err)
	}
	return remoteCall(in.PID, tid, saved, in.shimReturn(), fn, data, args...)
}

// inStop calls fn with every thread of the process stopped and one of
// them (caller) to make the calls, trying again up to routeTries times
// while fn returns errCallInFlight or no thread can make calls.
func (in *Injected) inStop(fn func(fz *Frozen, tid int, last bool) error) error {
	pf, err := filesOf(in.PID, in.Shim.Name)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		last := try == routeTries
		held := time.Now()
		_, err = Freeze(in.PID, func(fz *Frozen) error {
			tid, ok := in.caller(fz, pf)
			if !ok {
				if last {
					return fmt.Errorf("%w (%d stops tried)", ErrInjectNoThread, routeTries)
				}
				return errNoCaller
			}
			return fn(fz, tid, last)
		})
		in.Held += time.Since(held)
		if last || !errors.Is(err, errCallInFlight) && !errors.Is(err, errNoCaller) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// adoptChunk bounds the blocks given to mdshim_sample_adopt in one call:
// they are copied below the calling thread's stack.
const adoptChunk = 2048

// adopt gives the shim the blocks of in.Adopt, in a stop, through frozen
// thread tid.
func (in *Injected) adopt(tid int) error {
	blocks, err := in.Adopt()
	if err != nil {
		return err
	}
	in.Adopted = 0
	if len(blocks) == 0 {
		return nil
	}
	// Left in the shim's adopt area for its hooks' first call: no call
	// in the stop, every thread of which waits for it (0.3 to 1.5 ms
	// here).
	if len(blocks) <= abi.AdoptCap && in.leaveAdopted(blocks) == nil {
		in.Adopted = len(blocks)
		return nil
	}
	for len(blocks) > 0 {
		n := min(len(blocks), adoptChunk)
		data := make([]byte, 0, 8*n)
		for _, b := range blocks[:n] {
			data = binary.LittleEndian.AppendUint64(data, b)
		}
		got, err := in.callAs(tid, "mdshim_sample_adopt", data, uint64(n))
		if err != nil {
			return err
		}
		if int64(got) < 0 {
			return fmt.Errorf("the shim could not take the blocks sampled before: %v", unix.Errno(-int64(got)))
		}
		in.Adopted += int(got)
		blocks = blocks[n:]
	}
	return nil
}

// leaveAdopted writes blocks in the shim's adopt area, their count, and
// ADOPT_PENDING in its control word, every thread stopped. Nothing is
// pending until the bit is written, the last.
func (in *Injected) leaveAdopted(blocks []uint64) error {
	area := in.readWordOK(abi.SymbolAdoptArea)
	pendingAt, err := moduleSymbol(in.Shim, in.Base, abi.SymbolCtlPending)
	if err != nil {
		return err
	}
	countAt, err := moduleSymbol(in.Shim, in.Base, abi.SymbolAdoptCount)
	if err != nil {
		return err
	}
	if area == 0 || area == ^uint64(0) {
		return errors.New("the shim has no adopt area")
	}
	data := make([]byte, 0, 8*len(blocks))
	for _, b := range blocks {
		data = binary.LittleEndian.AppendUint64(data, b)
	}
	if err := writeMem(in.PID, area, data); err != nil {
		return err
	}
	if err := writeMem(in.PID, countAt, binary.LittleEndian.AppendUint64(nil, uint64(len(blocks)))); err != nil {
		return err
	}
	var w [4]byte
	if !readMem(in.PID, pendingAt, w[:]) {
		return errors.New("the shim's control word cannot be read")
	}
	return writeMem(in.PID, pendingAt, binary.LittleEndian.AppendUint32(nil, binary.LittleEndian.Uint32(w[:])|abi.AdoptPending))
}

// AdoptFailed is the count of blocks given to the shim (Adopt) that it
// had no memory to take: their frees are not reported.
func (in *Injected) AdoptFailed() uint64 {
	return in.readWord(abi.SymbolAdoptFailed)
}

// routeTries bounds the stops Route makes to find no thread inside a
// probed call.
const routeTries = 50

// errCallInFlight is a stop in which a thread was inside a probed call.
var errCallInFlight = errors.New("a thread is inside a probed call")

// uprobesArea returns the bounds of process pid's "[uprobes]" mapping,
// where the kernel points the return address of a call whose return is
// probed; false if there is none.
func uprobesArea(pid int) (lo, hi uint64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasSuffix(line, "[uprobes]") {
			continue
		}
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil {
			return lo, hi, true
		}
	}
	return 0, 0, false
}

// inFlight reports whether the stopped thread whose stack pointer is sp
// looks inside a call whose return is probed: a return address into the
// [uprobes] area (lo to hi) in the 8 KB above sp, which hold the frames of
// an allocator's call. A stale word there can look so too: the caller
// tries again a few times, then goes on.
func inFlight(pid int, sp, lo, hi uint64) bool {
	for n := 8192; n >= 512; n /= 2 {
		buf := make([]byte, n)
		if !readMem(pid, sp, buf) {
			continue
		}
		for i := 0; i+8 <= n; i += 8 {
			if w := binary.LittleEndian.Uint64(buf[i:]); w >= lo && w < hi {
				return true
			}
		}
		return false
	}
	return false
}

// Route points the process's calls at the shim's hooks, with every thread
// stopped, and then, still in that stop, calls off (the allocator's
// probes taken away). A thread stopped inside a probed call of the
// allocator would lose its return probe, and the call: the stop is made
// again, up to routeTries times, until no thread is inside one, and until
// one can make the calls (caller). It returns the GOT slots routed and
// those left to the allocator, and the threads that still looked inside a
// probed call at the last stop.
func (in *Injected) Route(off func()) (routed, unrouted, inside int, err error) {
	// Made at the first hit of a return probe in the process: read
	// again at each stop until there is one.
	lo, hi, probed := uprobesArea(in.PID)
	err = in.inStop(func(fz *Frozen, tid int, last bool) error {
		inside = 0
		if !probed {
			lo, hi, probed = uprobesArea(in.PID)
		}
		if probed {
			for _, t := range fz.Threads {
				if inFlight(in.PID, t.SP, lo, hi) {
					inside++
				}
			}
			if inside > 0 && !last {
				return errCallInFlight
			}
		}
		return in.route(tid, off, &routed)
	})
	if err != nil {
		return 0, 0, 0, err
	}
	unrouted = int(in.readWord("mdshim_inject_unrouted"))
	return routed, unrouted, inside, nil
}

// route makes frozen thread tid route the calls, and calls off.
func (in *Injected) route(tid int, off func(), routed *int) error {
	if in.Adopt != nil {
		if err := in.adopt(tid); err != nil {
			return err
		}
	}
	n, err := in.routeByWrites()
	if err != nil {
		// The shim's route does what is left: a slot routed already
		// is passed over.
		if n, err = in.callAs(tid, "mdshim_inject_route", nil); err != nil {
			return err
		}
	}
	if int64(n) < 0 {
		return fmt.Errorf("the shim could not route the calls: %v", unix.Errno(-int64(n)))
	}
	*routed = int(n)
	off()
	return nil
}

// routeByWrites routes the slots mdshim_inject_start listed as
// mdshim_inject_route would, every thread stopped, but from mdtrace:
// through /proc/PID/mem, which writes read-only pages (the shim makes two
// mprotect calls a page of slots, each a stop of the calling thread). The
// routed word first, then each slot that holds the value listed or the
// allocator's function (a lazy slot may have been bound since), then the
// counts. It returns the slots routed; on an error, the shim's route is to
// do the rest.
func (in *Injected) routeByWrites() (uint64, error) {
	if in.Listed <= 0 {
		return 0, errors.New("no slot listed")
	}
	list := in.readWordOK(abi.SymbolInjectList)
	dropped := in.readWordOK(abi.SymbolInjectDropped)
	if list == 0 || list == ^uint64(0) || dropped == ^uint64(0) {
		return 0, errors.New("the shim's list of slots cannot be read")
	}
	slots := make([]byte, in.Listed*abi.InjectSlotWords*8)
	if !readMem(in.PID, list, slots) {
		return 0, errors.New("the shim's list of slots cannot be read")
	}
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", in.PID), os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	put := func(at, v uint64) error {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		_, err := mem.WriteAt(b[:], int64(at))
		return err
	}
	putWord := func(name string, v uint64) error {
		at, err := moduleSymbol(in.Shim, in.Base, name)
		if err != nil {
			return err
		}
		return put(at, v)
	}
	if err := putWord("mdshim_inject_routed", 1); err != nil {
		return 0, err
	}
	listed := uint64(0)
	for i := 0; i < in.Listed; i++ {
		w := func(k int) uint64 { return binary.LittleEndian.Uint64(slots[(i*abi.InjectSlotWords+k)*8:]) }
		addr, old, hook, real := w(abi.InjectSlotAddr), w(abi.InjectSlotOld), w(abi.InjectSlotHook), w(abi.InjectSlotReal)
		var cur [8]byte
		if addr == 0 || !readMem(in.PID, addr, cur[:]) {
			// A module unloaded since it was listed (the shim
			// clears the address of such a slot).
			continue
		}
		listed++
		if v := binary.LittleEndian.Uint64(cur[:]); v != old && v != real {
			continue
		}
		if err := put(addr, hook); err != nil {
			return 0, err
		}
	}
	if err := putWord("mdshim_inject_slots", listed); err != nil {
		return 0, err
	}
	if err := putWord("mdshim_inject_unrouted", dropped); err != nil {
		return 0, err
	}
	return listed, nil
}

// Stop gives every routed call back to the allocator, with every thread
// stopped; it returns the slots restored.
func (in *Injected) Stop() (int, error) {
	var n uint64
	err := in.inStop(func(_ *Frozen, tid int, _ bool) error {
		var err error
		n, err = in.callAs(tid, "mdshim_inject_stop", nil)
		return err
	})
	return int(n), err
}

// samePIDNamespace reports whether process pid sees mdtrace's pids.
func samePIDNamespace(pid int) bool {
	ours, err1 := os.Stat("/proc/self/ns/pid")
	theirs, err2 := os.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return err1 == nil && err2 == nil && os.SameFile(ours, theirs)
}

// Ready tells a shim started early (AuditHooks.Early) that the probes on
// its sites are live: its batches are handed over from now on.
func (in *Injected) Ready() error {
	at, err := moduleSymbol(in.Shim, in.Base, abi.SymbolReady)
	if err != nil {
		return err
	}
	return writeReady(in.PID, at)
}

// readWordOK is readWord, with ^0 for a word that cannot be read.
func (in *Injected) readWordOK(name string) uint64 {
	at, err := moduleSymbol(in.Shim, in.Base, name)
	if err != nil {
		return ^uint64(0)
	}
	var b [8]byte
	if !readMem(in.PID, at, b[:]) {
		return ^uint64(0)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// readWord reads the shim's 64-bit variable name (0 if it cannot).
func (in *Injected) readWord(name string) uint64 {
	if v := in.readWordOK(name); v != ^uint64(0) {
		return v
	}
	return 0
}
