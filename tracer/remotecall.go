//go:build linux && amd64

package tracer

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A call made in the process returns to a stub that makes rt_sigreturn
// over a frame mdtrace wrote below the call's stack: the thread's
// registers as they were (a system call it was stopped in set to start
// again, as the kernel does), its signal mask, its vector state. mdtrace
// follows the call's system calls (PTRACE_SYSCALL), and once the stub's
// rt_sigreturn has run it stops the thread (PTRACE_INTERRUPT) and puts
// its registers back exactly, as before the call. Should mdtrace be gone
// meanwhile (killed), or give up waiting, the thread comes back by
// itself once the call returns, instead of returning to nowhere.
//
// The stubs: the shim's mdshim_inject_return, which keeps the function's
// result for mdtrace first, and the C library's own return from a signal
// handler (__restore_rt: mov $15, %rax; syscall), for dlopen, whose
// result mdtrace does not need.
//
// The shim's stub also sends its thread a signal the process ignores
// before its rt_sigreturn, when mdtrace names one (returnSignal): the
// call then runs without a stop at each of its system calls (100 to 400
// µs each on a 2-CPU VM, its two ptrace stops), and mdtrace puts the
// thread back in the signal's stop, which it drops. Should mdtrace be
// gone by then, the kernel discards the signal, and the thread goes back
// through the frame all the same.

// callReturn is where a call returns: at, a stub that ends with
// rt_sigreturn's syscall at end, or 0 for the address 0 (the call ends in
// a fault, which mdtrace takes). result says the stub keeps the result.
// signalled, when not 0, is the address after the stub's tkill: given a
// signal's number in r12, the stub sends it to its thread there, before
// its rt_sigreturn.
type callReturn struct {
	at, end   uint64
	result    bool
	signalled uint64
}

// shimStub is the code of the shim's mdshim_inject_return (shim/inject.c):
//
//	movq %rax, -8(%rsp)
//	testl %r12d, %r12d; jz 1f
//	movl $186, %eax; syscall          gettid
//	movl %eax, %edi; movl %r12d, %esi
//	movl $200, %eax; syscall          tkill
//	1: movl $15, %eax; syscall        rt_sigreturn
var shimStub = []byte{
	0x48, 0x89, 0x44, 0x24, 0xf8,
	0x45, 0x85, 0xe4, 0x74, 0x13,
	0xb8, 0xba, 0x00, 0x00, 0x00, 0x0f, 0x05,
	0x89, 0xc7, 0x44, 0x89, 0xe6,
	0xb8, 0xc8, 0x00, 0x00, 0x00, 0x0f, 0x05,
	0xb8, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05,
}

// The offsets in shimStub of the address after its tkill, and of its end.
const (
	shimStubSignalled = 29
	shimStubEnd       = 36
)

// shimReturn is the shim's mdshim_inject_return, when the shim has it and
// its code is shimStub (read once from the process).
func (in *Injected) shimReturn() callReturn {
	at, err := moduleSymbol(in.Shim, in.Base, "mdshim_inject_return")
	if err != nil {
		return callReturn{}
	}
	if in.stub == 0 {
		in.stub = -1
		b := make([]byte, len(shimStub))
		if readMem(in.PID, at, b) && bytes.Equal(b, shimStub) {
			in.stub = 1
		}
	}
	if in.stub < 0 {
		return callReturn{}
	}
	return callReturn{at: at, end: at + shimStubEnd, result: true, signalled: at + shimStubSignalled}
}

// returnSignals are the signals a stub may send its thread, in order of
// preference: their default is to ignore them.
var returnSignals = []unix.Signal{unix.SIGURG, unix.SIGWINCH}

// returnSignal picks the signal that stops thread tid of process pid at a
// call's end: one of returnSignals that the process does not catch and
// the thread has not pending, so that, should mdtrace be gone by then, the
// kernel discards it, and that is not in the mask avoid. 0 for none, and
// for a process under seccomp, whose filter may refuse the shim's stub's
// system calls.
func returnSignal(pid, tid int, avoid uint64) unix.Signal {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return 0
	}
	return returnSignalOf(string(b), avoid)
}

// returnSignalOf is returnSignal for the thread whose status file reads
// status, passing over the signals in the mask avoid too.
func returnSignalOf(status string, avoid uint64) unix.Signal {
	busy := avoid
	seen := 0
	for line := range strings.Lines(status) {
		key, val, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Seccomp":
			if val != "0" {
				return 0
			}
		case "SigCgt", "SigPnd", "ShdPnd":
			mask, err := strconv.ParseUint(val, 16, 64)
			if err != nil {
				return 0
			}
			busy |= mask
			seen++
		}
	}
	if seen != 3 {
		return 0 // not the status file of a thread of this kernel
	}
	for _, sig := range returnSignals {
		if busy&(1<<(sig-1)) == 0 {
			return sig
		}
	}
	return 0
}

// restoreRTCode is glibc's __restore_rt, on x86-64.
var restoreRTCode = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}

// libcReturn is the C library's __restore_rt in process memory, where the
// library is mapped at base; none if the library has no such code.
func libcReturn(path string, base uint64) callReturn {
	off, _, err := fromFile(symbolCache, path, func(id fileID) symbolKey { return symbolKey{id, "\x00__restore_rt"} },
		func() (uint64, error) { return readRestoreRT(path) })
	if err != nil {
		return callReturn{}
	}
	return callReturn{at: base + off, end: base + off + uint64(len(restoreRTCode))}
}

// readRestoreRT finds __restore_rt's code in the executable segments of
// the file at path (the symbol is local, and stripped from distributions'
// libraries), and returns its offset from the first segment's address.
func readRestoreRT(path string) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	first := firstLoadAddress(f)
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		if i, err := indexIn(p, restoreRTCode); err != nil {
			return 0, err
		} else if i >= 0 {
			return p.Vaddr + uint64(i) - first, nil
		}
	}
	return 0, errors.New("no __restore_rt")
}

// indexIn returns the offset of code's first occurrence in r, -1 if none.
// It reads r in pieces that overlap by len(code)-1 bytes, so that the
// search stops where the code is (__restore_rt lies in the first quarter
// of glibc's text): reading a whole segment of 1.5 MB cost the process,
// stopped meanwhile, 4 to 26 ms.
func indexIn(r io.ReaderAt, code []byte) (int64, error) {
	const piece = 64 << 10
	buf := make([]byte, piece+len(code)-1)
	for off := int64(0); ; off += piece {
		n, err := r.ReadAt(buf, off)
		if i := bytes.Index(buf[:n], code); i >= 0 {
			return off + int64(i), nil
		}
		if err != nil && err != io.EOF {
			return -1, err
		}
		if n < len(buf) {
			return -1, nil
		}
	}
}

// errCallLeft is returned when a call did not return in time and was
// left to return by itself: the thread is stopped inside it, its
// registers not put back; once let go, it goes back to where it was
// stopped as the call returns.
var errCallLeft = errors.New("the thread was let go, and goes back to where it was stopped once the call returns")

// The layout of the kernel's struct ucontext on x86-64 (asm/ucontext.h,
// asm/sigcontext.h).
const (
	ucSize       = 304
	ucFlags      = 0
	ucStackFlags = 24
	ucMcontext   = 40
	ucSigmask    = 296
	// mcontext: r8 … rip, eflags (18 words), then cs, gs, fs, ss (16
	// bits each), err, trapno, oldmask, cr2, fpstate.
	mcCS      = ucMcontext + 18*8
	mcFpstate = ucMcontext + 23*8
	// UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS.
	ucFlagsAll = 0x7
	// An alternate signal stack mode that sigaltstack refuses: the one
	// rt_sigreturn restores from the frame, whose error it ignores, so the
	// thread's own stays as it is.
	ssBadMode = 3
)

// The magic words of the vector state in a signal frame (asm/sigcontext.h).
const (
	fpXstateMagic1 = 0x46505853
	fpXstateMagic2 = 0x46505845
	// fx_sw_bytes, the words of a signal frame's vector state in its
	// reserved bytes: magic1, extended_size, xfeatures, xstate_size.
	fxSwBytes = 464
)

// The errors of a system call that the kernel starts again
// (linux/errno.h), and restart_syscall's number.
const (
	eRestartSys          = 512
	eRestartNoIntr       = 513
	eRestartNoHand       = 514
	eRestartRestartBlock = 516
	sysRestartSyscall    = 219
)

// resumeAt returns where the thread whose state s is goes on, and its rax
// there: where it was stopped, or, stopped in a system call that is to
// start again, at the system call again, as the kernel restarts it.
func (s *savedRegs) resumeAt() (rip, rax uint64) {
	r := s.regs
	rip, rax = r.Rip, r.Rax
	if int64(r.Orig_rax) >= 0 {
		switch -int64(r.Rax) {
		case eRestartSys, eRestartNoIntr, eRestartNoHand:
			rip, rax = r.Rip-2, r.Orig_rax
		case eRestartRestartBlock:
			rip, rax = r.Rip-2, sysRestartSyscall
		}
	}
	return rip, rax
}

// sigframe returns the frame rt_sigreturn takes to put back the thread
// whose state s is, laid out below sp: the return address slot (ret) at
// the returned address, 8 past a multiple of 16 as at a function's entry,
// the ucontext after it, and the vector state 64-byte aligned above.
// False if the vector state is too short for XSAVE's layout.
func (s *savedRegs) sigframe(sp, ret uint64) (at uint64, frame []byte, ok bool) {
	// PTRACE_GETREGSET gives the state in XSAVE's standard layout, with
	// the features enabled (XCR0) where a signal frame has its
	// fx_sw_bytes, and in its whole size. The frame has the process's:
	// rt_sigreturn takes a state larger than the process's own for the
	// legacy area alone, the vector registers' upper halves set to zero.
	// A process has the dynamic features (AMX's tile data) only once it
	// asked for them: one whose thread has them in use (the header's
	// XSTATE_BV) did.
	if len(s.xstate) < 512+64 {
		return 0, nil, false
	}
	xfeatures := binary.LittleEndian.Uint64(s.xstate[fxSwBytes:])
	size := uint64(len(s.xstate))
	if l := xsave(); binary.LittleEndian.Uint64(s.xstate[512:])&l.dynamic == 0 {
		xfeatures &^= l.dynamic
		size = min(size, uint64(l.frameSize(xfeatures)))
	}
	x := make([]byte, size)
	copy(x, s.xstate)
	clear(x[fxSwBytes:512])
	binary.LittleEndian.PutUint32(x[fxSwBytes:], fpXstateMagic1)
	binary.LittleEndian.PutUint32(x[fxSwBytes+4:], uint32(size+4))
	binary.LittleEndian.PutUint64(x[fxSwBytes+8:], xfeatures)
	binary.LittleEndian.PutUint32(x[fxSwBytes+16:], uint32(size))
	fp := (sp - size - 4) &^ 63
	uc := (fp - ucSize) &^ 15
	at = uc - 8
	frame = make([]byte, fp+size+4-at)
	le := binary.LittleEndian
	le.PutUint64(frame, ret)
	u := frame[8:]
	le.PutUint64(u[ucFlags:], ucFlagsAll)
	le.PutUint32(u[ucStackFlags:], ssBadMode)
	r := s.regs
	rip, rax := s.resumeAt()
	for i, v := range []uint64{r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15,
		r.Rdi, r.Rsi, r.Rbp, r.Rbx, r.Rdx, rax, r.Rcx, r.Rsp, rip, r.Eflags} {
		le.PutUint64(u[ucMcontext+8*i:], v)
	}
	le.PutUint16(u[mcCS:], uint16(r.Cs))
	le.PutUint16(u[mcCS+2:], uint16(r.Gs))
	le.PutUint16(u[mcCS+4:], uint16(r.Fs))
	le.PutUint16(u[mcCS+6:], uint16(r.Ss))
	le.PutUint64(u[mcFpstate:], fp)
	le.PutUint64(u[ucSigmask:], s.mask)
	copy(frame[fp-at:], x[:size])
	le.PutUint32(frame[fp-at+size:], fpXstateMagic2)
	return at, frame, true
}

// The kinds of system call stop, as PTRACE_GETEVENTMSG tells them
// (PTRACE_EVENTMSG_SYSCALL_ENTRY and _EXIT, Linux 5.3).
const (
	syscallEntry = 1
	syscallExit  = 2
)

// syscallStop returns the kind of system call stop thread tid, stopped
// with SIGTRAP, is in (0 for a SIGTRAP of another cause), with the system
// call's number and the address after it. The stop's siginfo tells: its
// si_code is SIGTRAP|0x80 (PTRACE_O_TRACESYSGOOD, which every thread
// mdtrace traces has: callOptions), SIGTRAP without.
func syscallStop(tid int) (op uint64, nr, ip uint64) {
	var si [128]byte
	if ptrace(unix.PTRACE_GETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&si[0]))) != nil {
		return 0, 0, 0
	}
	if code := int32(binary.LittleEndian.Uint32(si[8:])); code != int32(unix.SIGTRAP) && code != int32(unix.SIGTRAP)|0x80 {
		return 0, 0, 0
	}
	if ptrace(unix.PTRACE_GETEVENTMSG, tid, 0, uintptr(unsafe.Pointer(&op))) != nil {
		return 0, 0, 0
	}
	var regs unix.PtraceRegs
	if unix.PtraceGetRegs(tid, &regs) != nil {
		return 0, 0, 0
	}
	return op, regs.Orig_rax, regs.Rip
}

// ringAfter rings thread me (ringSignal) from the deadline on, every
// ringRetry, until the returned func is called: a wait it is blocked in
// then returns.
func ringAfter(me int, deadline time.Time) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-quit:
			return
		case <-t.C:
		}
		tick := time.NewTicker(ringRetry)
		defer tick.Stop()
		for {
			unix.Tgkill(os.Getpid(), me, unix.Signal(ringSignal))
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// remoteCall makes thread tid of process pid, in a ptrace stop with the
// registers saved, call fn with args, six at most (data, if any, copied
// below its stack and its address passed as the first argument), returning to back, and
// returns what fn returned (0 from a stub that does not keep it). The
// thread is left stopped with its saved registers back, whatever happens,
// but for errCallLeft.
func remoteCall(pid, tid int, saved *savedRegs, back callReturn, fn uint64, data []byte, args ...uint64) (ret uint64, err error) {
	if len(args)+min(len(data), 1) > 6 {
		return 0, fmt.Errorf("a call of %d arguments: six at most go in registers", len(args)+min(len(data), 1))
	}
	regs := saved.regs
	sp := regs.Rsp - 128 // the red zone
	if len(data) > 0 {
		sp = (sp - uint64(len(data))) &^ 15
		if err := writeMem(pid, sp, data); err != nil {
			return 0, fmt.Errorf("writing the call's argument: %w", err)
		}
		args = append([]uint64{sp}, args...)
	}
	var frame []byte
	var at uint64
	if back.at != 0 {
		var ok bool
		if at, frame, ok = saved.sigframe(sp, back.at); !ok {
			back = callReturn{}
		}
	}
	if back.at == 0 {
		// At a function's entry the stack pointer is 8 past a multiple
		// of 16: the return address, here 0, which ends the call in a
		// fault.
		at, frame = sp&^15-8, make([]byte, 8)
	}
	if err := writeMem(pid, at, frame); err != nil {
		return 0, fmt.Errorf("writing the call's return: %w", err)
	}
	regs.Rsp, regs.Rip, regs.Rax = at, fn, 0
	// Not in a system call any more: nothing restarts when it goes on.
	regs.Orig_rax = ^uint64(0)
	for i, a := range args {
		switch i {
		case 0:
			regs.Rdi = a
		case 1:
			regs.Rsi = a
		case 2:
			regs.Rdx = a
		case 3:
			regs.Rcx = a
		case 4:
			regs.R8 = a
		case 5:
			regs.R9 = a
		}
	}
	defer func() {
		if errors.Is(err, errCallLeft) {
			return
		}
		if rerr := saved.restore(tid); rerr != nil && err == nil {
			err = fmt.Errorf("restoring thread %d's registers: %w", tid, rerr)
		}
	}()
	blocked := ^uint64(faultSignals)
	// A stub that signals its thread stops it at the call's end, where its
	// registers go back at once: the call runs on without a stop. Without,
	// through a stub, each of the call's system calls stops the thread
	// until its rt_sigreturn has run; then it runs on to a stop of its
	// own.
	//
	// A stub that does not signal (the C library's) gets the signal sent
	// before the call, which its mask blocks: it stays pending until the
	// stub's rt_sigreturn gives the thread its own mask back, which must
	// not block it, and stops the thread there, back where it was.
	var signal unix.Signal
	pending := false
	switch {
	case back.signalled != 0:
		signal = returnSignal(pid, tid, 0)
		regs.R12 = uint64(signal)
		if signal != 0 {
			blocked &^= 1 << (signal - 1)
		}
	case back.at != 0:
		signal = returnSignal(pid, tid, saved.mask)
		pending = signal != 0
	}
	if err := unix.PtraceSetRegs(tid, &regs); err != nil {
		return 0, err
	}
	if err := sigmask(tid, false, &blocked); err != nil {
		return 0, err
	}
	if pending && unix.Tgkill(pid, tid, signal) != nil {
		signal, pending = 0, false
	}
	resume := unix.PTRACE_CONT
	if back.at != 0 && signal == 0 {
		resume = unix.PTRACE_SYSCALL
	}
	if err := ptrace(resume, tid, 0, 0); err != nil {
		return 0, err
	}
	var returned, interrupted bool
	// result reads what the stub kept of the function's result (0 for a
	// stub that keeps none).
	result := func() (uint64, error) {
		if !back.result {
			return 0, nil
		}
		var b [8]byte
		if !readMem(pid, at, b[:]) {
			return 0, fmt.Errorf("reading the call's result: %w", ErrProcessGone)
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	// backAt reports whether registers now are the thread's back through
	// the frame: where it was stopped, on its own stack.
	backAt := func(now *unix.PtraceRegs) bool {
		rip, _ := saved.resumeAt()
		return now.Rip == rip && now.Rsp == saved.regs.Rsp
	}
	deadline := time.Now().Add(injectCallWait)
	// The thread's stops are waited for, not polled for (each of its
	// system calls stops it): a ring interrupts the wait once the
	// deadline is past.
	blocking := ringReady()
	if blocking {
		defer ringAfter(unix.Gettid(), deadline)()
	}
	for {
		var ws unix.WaitStatus
		var wpid int
		var err error
		if blocking {
			if wpid, err = unix.Wait4(tid, &ws, unix.WALL, nil); err == unix.EINTR {
				wpid, err = 0, nil
			}
		} else {
			wpid, err = wait4(tid, &ws, unix.WALL|unix.WNOHANG)
		}
		switch {
		case err != nil || wpid == tid && (ws.Exited() || ws.Signaled()):
			return 0, fmt.Errorf("thread %d: %w", tid, ErrProcessGone)
		case wpid == 0:
			if time.Now().After(deadline) {
				ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0)
				wait4(tid, &ws, unix.WALL)
				if back.at != 0 && !returned {
					// Let go, it returns through the frame.
					return 0, fmt.Errorf("the call did not return within %s: %w", injectCallWait, errCallLeft)
				}
				if pending {
					// Back, in a handler: it stays there.
					if err := saved.reread(tid); err != nil {
						return 0, err
					}
				}
				// Stopped where it is; its registers go back.
				return 0, fmt.Errorf("the call did not return within %s", injectCallWait)
			}
			if !blocking {
				nap(100 * time.Microsecond)
			}
			continue
		}
		if !ws.Stopped() {
			continue
		}
		sig := ws.StopSignal()
		if int(ws>>16)&0xff != 0 {
			if interrupted && int(ws>>16)&0xff == unix.PTRACE_EVENT_STOP {
				// Stopped after its rt_sigreturn: done.
				return ret, nil
			}
			// An event stop (a group stop): on.
			ptrace(resume, tid, 0, 0)
			continue
		}
		if signal != 0 && sig == signal {
			var now unix.PtraceRegs
			if err := unix.PtraceGetRegs(tid, &now); err != nil {
				return 0, err
			}
			if pending {
				if returned {
					// After a signal delivered as it came back
					// (below): its state now is what goes back.
					return 0, saved.reread(tid)
				}
				if backAt(&now) {
					// Back through the frame: its registers
					// go back exactly (the deferred restore),
					// and the signal is dropped.
					return 0, nil
				}
				// Delivered early (the call unblocked it):
				// its system calls are followed from now on.
				signal, pending, resume = 0, false, unix.PTRACE_SYSCALL
				ptrace(resume, tid, 0, 0)
				continue
			}
			if now.Rip == back.signalled {
				// The stub's: the call has returned. The thread
				// stays in this stop, its registers, vector state
				// and mask put back (the deferred restore), and
				// the signal is dropped as it goes on.
				return result()
			}
			// Another's, which the process does not catch: on.
			ptrace(resume, tid, 0, uintptr(sig))
			continue
		}
		if pending && !returned {
			var now unix.PtraceRegs
			if err := unix.PtraceGetRegs(tid, &now); err != nil {
				return 0, err
			}
			if backAt(&now) {
				// Back through the frame, and another signal
				// came first (a lower number): it is delivered
				// as it would have been, its registers put back
				// exactly first; the thread's own stops it then,
				// wherever the handler is.
				if err := saved.restore(tid); err != nil {
					return 0, err
				}
				returned = true
				ptrace(resume, tid, 0, uintptr(sig))
				continue
			}
		}
		if back.at != 0 && (sig == unix.SIGTRAP || sig == unix.SIGTRAP|0x80) {
			switch op, nr, ip := syscallStop(tid); {
			case op == syscallEntry && nr == unix.SYS_RT_SIGRETURN && ip == back.end:
				returned = true
				if ret, err = result(); err != nil {
					return 0, err
				}
				ptrace(resume, tid, 0, 0)
				continue
			case op == syscallExit && returned:
				// Its state is back: a stop of the kind it was
				// in, where its registers are put back exactly.
				if err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err != nil {
					return 0, err
				}
				interrupted = true
				resume = unix.PTRACE_CONT
				ptrace(resume, tid, 0, 0)
				continue
			case op == syscallEntry || op == syscallExit:
				ptrace(resume, tid, 0, 0)
				continue
			}
		}
		if sig == unix.SIGSEGV && back.at == 0 {
			var now unix.PtraceRegs
			if err := unix.PtraceGetRegs(tid, &now); err != nil {
				return 0, err
			}
			if now.Rip == 0 {
				return now.Rax, nil
			}
			return 0, fmt.Errorf("the call faulted at %#x", now.Rip)
		}
		if faultSignals&(1<<((sig&0x7f)-1)) != 0 {
			// Raised by the call: the program never sees it.
			var now unix.PtraceRegs
			unix.PtraceGetRegs(tid, &now)
			return 0, fmt.Errorf("the call raised %v at %#x", sig, now.Rip)
		}
		// Every other signal is blocked while the call runs, and waits.
		// Should one come all the same, its handler runs above the call.
		ptrace(resume, tid, 0, uintptr(sig))
	}
}
