//go:build linux

package tracer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/stacks"
)

var errESRCH = unix.ESRCH

// traceOptions: stop at the process's exit (reports) and at its execs (a
// new program image); with forks followed, at its forks too, whose
// children are then traced from their first instruction. And
// callOptions, which every thread mdtrace traces has.
const (
	traceOptions       = callOptions | unix.PTRACE_O_TRACEEXIT | unix.PTRACE_O_TRACEEXEC
	traceForkOptions   = traceOptions | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK
	maxFollowedProcess = 4096
	// callOptions mark a system call's stop (SIGTRAP|0x80, where a call
	// mdtrace makes in a thread stops at each, remotecall.go): a tracer
	// that dies in such a stop leaves the kernel that stop's signal to
	// send the thread, and SIGTRAP|0x80 is no signal, where SIGTRAP
	// would kill the process.
	callOptions = unix.PTRACE_O_TRACESYSGOOD
)

// Hooks are called by a Process from its control goroutine.
type Hooks struct {
	// Ready is called once the process can be probed: a launched command
	// is stopped before its first instruction (its executable and loader
	// are mapped, its libraries are not yet); an attached process runs on.
	// An error stops mdtrace; a launched command is killed.
	Ready func(pid int) error
	// Exit is called when the process is about to exit, while its memory,
	// maps and files can still be read. The process waits until it returns.
	Exit func(pid int)
	// Exec is called when the process has executed a new program, stopped
	// before its first instruction as for Ready. It may be nil.
	Exec func(pid int)
	// Fork, when set, makes the Process follow forks: it is called when a
	// traced process has forked (vfork: shares its parent's memory until
	// it executes a program), with the child held before its first
	// instruction. The child is then traced like its parent, with the
	// same hooks.
	Fork func(parent, child int, vfork bool)
	// Gone, if set, is called once a traced process has ended: its exit
	// status was seen, or its parent reaped it first. The loop calls it,
	// and a process forked meanwhile waits for it to return. A
	// single-threaded process gone has run its whole exit.
	Gone func(pid int)
	// LeaderLeft, if set, is called instead of Exit when a traced
	// process's main thread ends alone (pthread_exit) while other threads
	// run on: the process goes on, and it cannot be held at its end (only
	// its main thread is traced), which Gone tells. Its maps can still be
	// read at this call; once it returns, /proc/PID shows no maps,
	// program or memory. Without it, Exit is called then, as if the
	// process were exiting.
	LeaderLeft func(pid int)
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	// Code is the exit code, or 128+signal for a process killed by a signal.
	Code int
	// Signal is the signal that killed the process, 0 if none.
	Signal syscall.Signal
	// Known is false when the process was reaped by someone else (an
	// attached process whose parent waited for it first), or, Unseen,
	// when the end of a process not held was not seen.
	Known  bool
	Unseen bool
}

// Process is a process under mdtrace's control: launched by it, or
// attached to. It is traced with ptrace (PTRACE_SEIZE) only to be held at
// its exit while the reports are written; signals pass through unchanged
// and job control (stop, continue) keeps working. A process attached to
// with AttachUnheld is not traced at all: a pidfd tells its end, and a
// Watcher its execs and exit status, so that debuggers can attach beside
// mdtrace.
//
// All ptrace requests come from one goroutine locked to its OS thread, as
// ptrace requires. Process methods are safe for concurrent use.
type Process struct {
	PID int

	// tracees are the processes traced: PID and, with forks followed, its
	// descendants. Only the control goroutine uses it.
	tracees map[int]bool
	// followed counts the children added to tracees (forked).
	followed int
	launched bool
	hooks    Hooks
	// watch, for a process not held, tells its execs and its exit
	// status; pidfd tells its end.
	watch Watcher
	pidfd int
	// reqq carries the work other goroutines ask of the control
	// goroutine (a detach, an adoption, a freeze).
	reqq chan request
	// tracerTID is the OS thread of the control goroutine, the tracer;
	// atStop is the tracee a hook is called at the stop of (its exit),
	// 0 if none. lingering are threads a freeze seized that had not
	// stopped, detached by the loop as they stop.
	tracerTID int
	// waiting is set while the tracer waits in waitAny, to be rung.
	waiting   atomic.Bool
	atStop    int
	lingering *freezer
	done      chan struct{}
	status    ExitStatus
	// atExit is the status the process's exit stop gave, for when its
	// parent reaps it first.
	atExit ExitStatus
	err    error
}

// LaunchError is an error starting the command, with the exit code a shell
// would give (127: not found, 126: not executable).
type LaunchError struct {
	Code int
	Err  error
}

func (e *LaunchError) Error() string { return e.Err.Error() }
func (e *LaunchError) Unwrap() error { return e.Err }

// Launch starts argv with the given environment (nil: mdtrace's own),
// standard streams inherited and the extra files as descriptors 3, 4, ...,
// calls hooks.Ready while it is stopped before its first instruction, then
// lets it run.
func Launch(argv []string, env []string, extra []*os.File, hooks Hooks) (*Process, error) {
	return LaunchAs(argv, env, extra, nil, hooks)
}

// LaunchAs is Launch with the command run with the user and groups of
// cred (nil: mdtrace's own).
func LaunchAs(argv []string, env []string, extra []*os.File, cred *syscall.Credential, hooks Hooks) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command to run")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		code := 127
		if errors.Is(err, os.ErrPermission) {
			code = 126
		}
		return nil, &LaunchError{Code: code, Err: fmt.Errorf("cannot run %s: %w", argv[0], err)}
	}
	p := newProcess(hooks)
	started := make(chan error, 1)
	go p.control(func() error { return p.launch(path, argv, env, extra, cred) }, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Attach traces the running process pid and calls hooks.Ready.
func Attach(pid int, hooks Hooks) (*Process, error) {
	return attachWith(pid, hooks, nil)
}

// AttachUnheld calls hooks.Ready for the running process pid without
// tracing it with ptrace: other tracers (debuggers, strace, profilers) can
// attach beside mdtrace. w tells its execs, after the fact (hooks.Exec is
// called while the new program runs), and how it ended: hooks.Exit is
// called once it is gone, its memory, maps and files with it. Forks are
// not followed (hooks.Fork must be nil), and Freeze seizes the threads
// only while it runs.
func AttachUnheld(pid int, hooks Hooks, w Watcher) (*Process, error) {
	if hooks.Fork != nil {
		return nil, errors.New("following forks needs ptrace")
	}
	if w == nil {
		return nil, errors.New("no watcher for an unheld process")
	}
	return attachWith(pid, hooks, w)
}

func attachWith(pid int, hooks Hooks, w Watcher) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("invalid PID %d", pid)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return nil, fmt.Errorf("no process with PID %d", pid)
	}
	if pid == os.Getpid() {
		return nil, fmt.Errorf("PID %d is mdtrace itself", pid)
	}
	p := newProcess(hooks)
	p.watch = w
	started := make(chan error, 1)
	go p.control(func() error { return p.attach(pid) }, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func newProcess(h Hooks) *Process {
	return &Process{hooks: h, tracees: map[int]bool{}, reqq: make(chan request), done: make(chan struct{}), pidfd: -1}
}

// request is work the control goroutine does for another goroutine; it
// reports whether the loop ends with it (a detach).
type request func() (end bool)

// Adopt follows child, a process forked by a thread of parent, a traced
// process, that ptrace did not report (it reports the forks of the threads
// it traces, the main ones): it is traced from now on and the Fork hook is
// called, as for a child ptrace reported. child must be waiting for it (the
// shim's fork handler asks mdtrace and waits). It fails when forks are not
// followed, when parent is not traced here, and once the process is gone.
func (p *Process) Adopt(parent, child int) error {
	if p.hooks.Fork == nil {
		return errors.New("forks are not followed")
	}
	reply := make(chan error, 1)
	if err := p.send(func() bool { reply <- p.adopt(parent, child); return false }, nil); err != nil {
		return err
	}
	return <-reply
}

// adopt carries out an adoption on the control goroutine.
func (p *Process) adopt(parent, child int) error {
	switch {
	case p.watch != nil:
		return errors.New("forks are not followed")
	case !p.tracees[parent]:
		return fmt.Errorf("process %d is not traced", parent)
	case p.tracees[child]:
		return nil
	case len(p.tracees) >= maxFollowedProcess:
		return fmt.Errorf("%d processes followed already", len(p.tracees))
	}
	if err := ptrace(unix.PTRACE_SEIZE, child, 0, p.options()); err != nil {
		return fmt.Errorf("tracing process %d, forked from %d: %w", child, parent, err)
	}
	p.follow(parent, child, false)
	return nil
}

// follow makes child, traced now, one of the tracees, and calls the Fork hook.
func (p *Process) follow(parent, child int, vfork bool) {
	p.tracees[child] = true
	p.followed++
	p.hooks.Fork(parent, child, vfork)
}

// options are the ptrace options of every tracee.
func (p *Process) options() uintptr {
	if p.hooks.Fork != nil {
		return traceForkOptions
	}
	return traceOptions
}

// Done is closed when the process, and every descendant followed, has
// exited or has been detached.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits until the process has exited (or has been detached) and
// returns how it ended.
func (p *Process) Wait() (ExitStatus, error) {
	<-p.done
	return p.status, p.err
}

// Detach stops tracing the process and lets it run on. It is a no-op once
// the process has exited.
func (p *Process) Detach() error {
	reply := make(chan error, 1)
	detach := func() bool {
		if p.watch != nil {
			// Not traced: nothing to let go of.
			reply <- nil
		} else {
			reply <- p.detachAll()
		}
		return true
	}
	if p.send(detach, nil) != nil {
		return nil
	}
	return <-reply
}

// control runs on a locked OS thread: it starts tracing, then handles the
// process's stops until it exits or is detached.
func (p *Process) control(start func() error, started chan<- error) {
	// The thread stays locked: it is the tracer, and dies with the goroutine.
	runtime.LockOSThread()
	p.tracerTID = unix.Gettid()
	// A loop that waits for stops in waitid needs no SIGCHLD.
	var sigchld chan os.Signal
	if p.watch == nil && !ringReady() {
		sigchld = make(chan os.Signal, 1)
		signal.Notify(sigchld, syscall.SIGCHLD)
		defer signal.Stop(sigchld)
	}
	if err := start(); err != nil {
		started <- err
		close(p.done)
		return
	}
	if err := p.hooks.Ready(p.PID); err != nil {
		p.abort()
		started <- err
		close(p.done)
		return
	}
	if err := p.resume(); err != nil {
		started <- err
		close(p.done)
		return
	}
	started <- nil
	switch {
	case p.watch != nil:
		p.watchLoop()
	case sigchld == nil:
		p.waitLoop()
	default:
		p.loop(sigchld)
	}
	close(p.done)
}

// launch starts the command stopped at its exec, then re-attaches with
// PTRACE_SEIZE so that job control works while it is traced.
func (p *Process) launch(path string, argv, env []string, extra []*os.File, cred *syscall.Credential) error {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = extra
	// The child takes cred's user and groups before PTRACE_TRACEME and
	// the exec, so the program starts as that user, held for mdtrace.
	// It is held by job control (SIGSTOP, below), which a tracer's death
	// leaves in place: if mdtrace is killed, its parent's death sends it
	// SIGCONT (set after the credentials, which would clear it; the
	// thread that forks is the ptrace loop's, locked until the end), so
	// that it is never left stopped. Once it runs, a SIGCONT changes
	// nothing.
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true, Credential: cred, Pdeathsig: syscall.SIGCONT}
	if err := cmd.Start(); err != nil {
		// A kernel without 32-bit emulation refuses a 32-bit program:
		// say so as for one that runs.
		if cerr := CheckExecutable(path); errors.Is(err, unix.ENOEXEC) && errors.Is(cerr, ErrNot64Bit) {
			return fmt.Errorf("cannot trace %s: %w", path, errors.Unwrap(cerr))
		}
		code := 126
		if errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return &LaunchError{Code: code, Err: fmt.Errorf("cannot run %s: %w", argv[0], err)}
	}
	pid := cmd.Process.Pid
	p.PID = pid
	p.tracees[pid] = true
	p.launched = true
	var ws unix.WaitStatus
	if _, err := wait4(pid, &ws, unix.WALL); err != nil {
		return fmt.Errorf("waiting for %s to start: %w", argv[0], err)
	}
	if !ws.Stopped() {
		return fmt.Errorf("%s exited before it started", argv[0])
	}
	// Hand the stop over to job control (SIGSTOP) at once, then seize the
	// stopped process: it has not run an instruction of its own yet. A
	// tracer that dies in this first stop (exec's SIGTRAP, from
	// PTRACE_TRACEME) has the kernel deliver that SIGTRAP, which kills
	// the command: nothing else is done in it.
	if err := ptrace(unix.PTRACE_DETACH, pid, 0, uintptr(unix.SIGSTOP)); err != nil {
		p.kill()
		return fmt.Errorf("detaching from %s: %w", argv[0], err)
	}
	if _, err := wait4(pid, &ws, unix.WALL|unix.WUNTRACED); err != nil || !ws.Stopped() {
		p.kill()
		return fmt.Errorf("%s did not stop before its start", argv[0])
	}
	if err := ptrace(unix.PTRACE_SEIZE, pid, 0, p.options()); err != nil {
		p.kill()
		return fmt.Errorf("tracing %s: %w", argv[0], err)
	}
	if err := CheckExecutable(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
		p.kill()
		exe, _ := procExe(pid)
		if exe == "" {
			exe = path
		}
		return fmt.Errorf("cannot trace %s: %w", exe, errors.Unwrap(err))
	}
	return nil
}

func (p *Process) attach(pid int) error {
	p.PID = pid
	p.tracees[pid] = true
	if err := CheckExecutable(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if kernelThread(pid) {
				return fmt.Errorf("process %d is a kernel thread: it has no program or allocator to trace", pid)
			}
			// Its main thread ended, others run on.
			if stacks.LiveTask(pid) != "" {
				return fmt.Errorf("process %d runs on without its main thread, which has ended (pthread_exit): the kernel ties the probes of a process to that thread, and shows no program, maps or memory of it under /proc/%d; mdtrace -p cannot trace it (mdtrace --all lists it)", pid, pid)
			}
			return fmt.Errorf("process %d: %w", pid, ErrProcessGone)
		}
		exe, _ := procExe(pid)
		return fmt.Errorf("cannot trace process %d (%s): %w", pid, exe, errors.Unwrap(err))
	}
	if p.watch != nil {
		return p.watchStart(pid)
	}
	err := ptrace(unix.PTRACE_SEIZE, pid, 0, p.options())
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("process %d: %w", pid, ErrProcessGone)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("not permitted to trace process %d: it is traced by another debugger, or ptrace is restricted (needs CAP_SYS_PTRACE)", pid)
	case err != nil:
		return fmt.Errorf("tracing process %d: %w", pid, err)
	}
	return nil
}

// resume lets a launched command run; an attached process already runs.
func (p *Process) resume() error {
	if !p.launched {
		return nil
	}
	if err := unix.Kill(p.PID, unix.SIGCONT); err != nil {
		return fmt.Errorf("resuming process %d: %w", p.PID, err)
	}
	return nil
}

// abort gives up on a process after a failed Ready: a launched command is
// killed (it never ran), an attached one is left alone.
func (p *Process) abort() {
	switch {
	case p.launched:
		p.kill()
	case p.watch != nil:
		p.unwatch()
	default:
		p.detachNow(p.PID, 0)
	}
}

func (p *Process) kill() {
	unix.Kill(p.PID, unix.SIGKILL)
	var ws unix.WaitStatus
	wait4(p.PID, &ws, unix.WALL)
}

// loop handles the ptrace stops of the process and the descendants
// followed until they are all gone.
func (p *Process) loop(sigchld <-chan os.Signal) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for len(p.tracees) > 0 {
		followed := p.followed
		p.poll()
		if len(p.tracees) == 0 {
			return
		}
		if p.followed != followed {
			// A child added during the round may not have been
			// polled, and the SIGCHLD of its first stop may have
			// merged with its parent's: poll again rather than
			// wait for the next tick.
			continue
		}
		select {
		case <-sigchld:
		case <-tick.C:
		case r := <-p.reqq:
			if r() {
				return
			}
		}
	}
}

// waitLoop is loop, waiting in waitid for the tracees' stops (ring.go).
func (p *Process) waitLoop() {
	stop := make(chan struct{})
	defer close(stop)
	go p.ringEvery(ringTick, stop)
	p.poll()
	foreign := 0
	for len(p.tracees) > 0 {
		if p.serveRequests() {
			return
		}
		pid, err := p.waitAny()
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECHILD):
			// Rung (a request, or the tick), or no tracee is left
			// to wait for: each is polled, and one gone unseen is
			// forgotten.
			p.poll()
		case err != nil || foreign == maxForeign:
			// The loop of SIGCHLD then.
			p.loopOnSignals()
			return
		case p.tracees[pid]:
			if !p.take(pid) {
				// Told of, yet not there to take: as for a child
				// not its own.
				foreign++
				time.Sleep(ringRetry)
			}
		case p.lingering != nil && slices.Contains(p.lingering.lingering, pid):
			if p.lingering.waitLingering(false) {
				p.lingering = nil
			}
		default:
			// A child of this thread that is not traced (a hook's
			// command), whose owner has not reaped it yet.
			foreign++
			time.Sleep(ringRetry)
		}
	}
}

// maxForeign is how many times waitLoop finds a child not its own before
// it goes back to the loop of SIGCHLD, which waits for each tracee by PID.
const maxForeign = 100

// loopOnSignals is loop, from a waitLoop.
func (p *Process) loopOnSignals() {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	p.loop(sigchld)
}

// serveRequests carries out the requests waiting for the control
// goroutine; it reports whether one was to detach, done then.
func (p *Process) serveRequests() bool {
	for {
		select {
		case r := <-p.reqq:
			if r() {
				return true
			}
		default:
			return false
		}
	}
}

// poll acts on every stop and exit its tracees have to report, and on the
// threads a freeze left to stop.
func (p *Process) poll() {
	for pid := range p.tracees {
		for p.tracees[pid] && p.take(pid) {
		}
	}
	if p.lingering != nil && p.lingering.waitLingering(false) {
		p.lingering = nil
	}
}

// take acts on the next stop or exit tracee pid has to report, without
// waiting; it returns false when there is none. A tracee gone is untraced.
func (p *Process) take(pid int) bool {
	var ws unix.WaitStatus
	wpid, err := wait4(pid, &ws, unix.WALL|unix.WNOHANG)
	switch {
	case err != nil:
		// Reaped by its parent first: the exit status is the one the
		// exit stop gave, if it was seen.
		if pid == p.PID {
			p.status = p.atExit
		}
		p.untrace(pid)
	case wpid != pid:
		return false
	case p.handle(pid, ws):
		p.untrace(pid)
	}
	return true
}

// untrace forgets tracee pid, which has ended.
func (p *Process) untrace(pid int) {
	delete(p.tracees, pid)
	if p.hooks.Gone != nil {
		p.hooks.Gone(pid)
	}
}

// exitStatusAt returns the exit status of process pid, stopped at its
// exit (PTRACE_EVENT_EXIT), which the stop's event message holds in
// wait(2)'s encoding; not Known if it cannot be read.
func exitStatusAt(pid int) ExitStatus {
	msg, err := unix.PtraceGetEventMsg(pid)
	if err != nil {
		return ExitStatus{}
	}
	return statusOf(unix.WaitStatus(msg))
}

// statusOf is the ExitStatus of a wait status of a process that ended.
func statusOf(ws unix.WaitStatus) ExitStatus {
	switch {
	case ws.Exited():
		return ExitStatus{Code: ws.ExitStatus(), Known: true}
	case ws.Signaled():
		return ExitStatus{Code: 128 + int(ws.Signal()), Signal: ws.Signal(), Known: true}
	}
	return ExitStatus{}
}

// handle acts on one wait status of pid; it reports whether pid is gone.
func (p *Process) handle(pid int, ws unix.WaitStatus) bool {
	switch {
	case ws.Exited(), ws.Signaled():
		if pid == p.PID {
			p.status = statusOf(ws)
		}
		return true
	case !ws.Stopped():
		return false
	}
	sig := ws.StopSignal()
	switch event := int(ws>>16) & 0xff; event {
	case unix.PTRACE_EVENT_EXIT:
		if p.hooks.LeaderLeft != nil && leaderLeaves(pid) {
			p.atStop = pid
			p.hooks.LeaderLeft(pid)
			p.atStop = 0
			ptrace(unix.PTRACE_CONT, pid, 0, 0)
			break
		}
		if pid == p.PID {
			p.atExit = exitStatusAt(pid)
		}
		if p.hooks.Exit != nil {
			p.atStop = pid
			p.hooks.Exit(pid)
			p.atStop = 0
		}
		ptrace(unix.PTRACE_CONT, pid, 0, 0)
	case unix.PTRACE_EVENT_EXEC:
		if p.hooks.Exec != nil {
			p.hooks.Exec(pid)
		}
		ptrace(unix.PTRACE_CONT, pid, 0, 0)
	case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
		p.forked(pid, event == unix.PTRACE_EVENT_VFORK)
		ptrace(unix.PTRACE_CONT, pid, 0, 0)
	case unix.PTRACE_EVENT_STOP:
		if isStopSignal(sig) {
			// Group stop: stay stopped, but let SIGCONT through.
			ptrace(unix.PTRACE_LISTEN, pid, 0, 0)
		} else {
			// Also the first stop of a child followed.
			ptrace(unix.PTRACE_CONT, pid, 0, 0)
		}
	default:
		// A signal on its way to the process: deliver it.
		ptrace(unix.PTRACE_CONT, pid, 0, uintptr(sig))
	}
	return false
}

// forked follows the child of a traced process. The kernel traced it at
// its creation; it stays held at its first stop, which the loop sees only
// once it is a tracee, so the Fork hook runs before it runs any code.
func (p *Process) forked(parent int, vfork bool) {
	msg, err := unix.PtraceGetEventMsg(parent)
	if err != nil || msg == 0 {
		return
	}
	child := int(msg)
	if len(p.tracees) >= maxFollowedProcess {
		// Let it go untraced rather than hold it forever.
		ptrace(unix.PTRACE_DETACH, child, 0, 0)
		return
	}
	p.follow(parent, child, vfork)
}

// leaderLeaves reports whether process pid, stopped at its main thread's
// exit (PTRACE_EVENT_EXIT), loses that thread alone: the thread called
// exit, not exit_group (pthread_exit in main does so), and another of its
// threads is not exiting. A fatal signal or exit_group ends every thread
// with the main one.
func leaderLeaves(pid int) bool {
	var regs unix.PtraceRegs
	if unix.PtraceGetRegs(pid, &regs) != nil || regs.Orig_rax != unix.SYS_EXIT {
		return false
	}
	return otherThreadRuns(pid)
}

// otherThreadRuns reports whether a thread of process pid other than its
// main thread has not begun to exit.
func otherThreadRuns(pid int) bool {
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil || tid == pid {
			continue
		}
		if !threadExiting(pid, tid) {
			return true
		}
	}
	return false
}

// threadExiting reports whether thread tid of process pid has begun to
// exit, or is gone.
func threadExiting(pid, tid int) bool {
	state, flags, ok := stateAt(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	return !ok || exitingState(state, flags)
}

func isStopSignal(s syscall.Signal) bool {
	return s == unix.SIGSTOP || s == unix.SIGTSTP || s == unix.SIGTTIN || s == unix.SIGTTOU
}

// detachAll detaches from every tracee.
func (p *Process) detachAll() error {
	var first error
	for pid := range p.tracees {
		if err := p.detachRunning(pid); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// detachRunning interrupts a running tracee and detaches from it,
// delivering any signal it was stopped for.
func (p *Process) detachRunning(pid int) error {
	if err := ptrace(unix.PTRACE_INTERRUPT, pid, 0, 0); err != nil {
		return nil // already gone
	}
	for i := 0; i < 100; i++ {
		var ws unix.WaitStatus
		wpid, err := wait4(pid, &ws, unix.WALL)
		if err != nil || wpid == 0 {
			return nil
		}
		if ws.Exited() || ws.Signaled() {
			p.handle(pid, ws)
			return nil
		}
		if !ws.Stopped() {
			continue
		}
		sig := 0
		switch event := int(ws>>16) & 0xff; event {
		case unix.PTRACE_EVENT_EXIT:
			if p.hooks.Exit != nil {
				p.atStop = pid
				p.hooks.Exit(pid)
				p.atStop = 0
			}
		case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
			// The new child was traced at its creation: let it go too.
			if msg, err := unix.PtraceGetEventMsg(pid); err == nil && msg != 0 {
				p.detachRunning(int(msg))
			}
		case unix.PTRACE_EVENT_STOP, unix.PTRACE_EVENT_EXEC:
		default:
			sig = int(ws.StopSignal())
		}
		return p.detachNow(pid, sig)
	}
	return fmt.Errorf("process %d did not stop to be detached", pid)
}

func (p *Process) detachNow(pid, sig int) error {
	if err := ptrace(unix.PTRACE_DETACH, pid, 0, uintptr(sig)); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("detaching from process %d: %w", pid, err)
	}
	return nil
}

func ptrace(req int, pid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(pid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func wait4(pid int, ws *unix.WaitStatus, opts int) (int, error) {
	for {
		wpid, err := unix.Wait4(pid, ws, opts, nil)
		if err == unix.EINTR {
			continue
		}
		return wpid, err
	}
}

// pfKthread is the kernel's PF_KTHREAD, a task flag (field 9 of
// /proc/PID/stat).
const pfKthread = 0x00200000

// kernelThread reports whether pid is a kernel thread, which has no
// /proc/PID/exe, as a process that has exited has none.
func kernelThread(pid int) bool {
	_, flags, ok := taskState(pid)
	return ok && flags&pfKthread != 0
}

// pfExiting is the kernel's PF_EXITING, set on a thread as it begins to
// exit, before its memory is let go.
const pfExiting = 0x4

// Exiting reports whether process pid has begun to exit, or is gone: its
// main thread has ended (a process whose main thread is gone shows no
// maps), or the process is being torn down (a read of its maps may have
// stopped part way). A read of the process made before Exiting returned
// false saw it whole.
func Exiting(pid int) bool {
	state, flags, ok := taskState(pid)
	return !ok || exitingState(state, flags)
}

// exitingState reports whether a task of that state and those flags has
// begun to exit.
func exitingState(state string, flags uint64) bool {
	return state == "Z" || state == "X" || state == "x" || flags&pfExiting != 0
}

// taskState returns the state (field 3) and the flags (field 9) of
// /proc/PID/stat; ok is false if they cannot be read.
func taskState(pid int) (state string, flags uint64, ok bool) {
	return stateAt(fmt.Sprintf("/proc/%d/stat", pid))
}

// stateAt is taskState for the stat file at path (a process's or a
// thread's).
func stateAt(path string) (state string, flags uint64, ok bool) {
	f, err := statFieldsAt(path)
	if err != nil || len(f) < 7 {
		return "", 0, false
	}
	flags, err = strconv.ParseUint(f[6], 10, 64)
	return f[0], flags, err == nil
}

// StatFields returns the fields of /proc/PID/stat that follow the command
// name: the state (field 3) first, then the parent (field 4), and so on.
func StatFields(pid int) ([]string, error) {
	return statFieldsAt(fmt.Sprintf("/proc/%d/stat", pid))
}

func statFieldsAt(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// The command name may hold spaces and parentheses: the fields
	// start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("%s: no command name", path)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// ParentPID returns the parent of process pid.
func ParentPID(pid int) (int, error) {
	f, err := StatFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	return strconv.Atoi(f[1])
}
