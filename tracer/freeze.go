//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ThreadState is what a reachability check needs of a stopped thread.
type ThreadState struct {
	TID int
	// Regs are the values of its general-purpose registers (the TLS
	// base included).
	Regs []uint64
	// SP is its stack pointer.
	SP uint64
}

// Frozen is a process whose threads are stopped.
type Frozen struct {
	PID     int
	Threads []ThreadState
	// Unstopped counts the threads that did not stop in time (waiting
	// for a vfork child, or in an uninterruptible sleep) or could not be
	// traced: their registers are not known. They run no code of the
	// program meanwhile but for the end of the system call they are in.
	Unstopped int
}

// freezeQueueWait is how long a freeze request waits for the tracer.
const freezeQueueWait = 10 * time.Second

// freezeWait is how long a thread may take to stop.
const freezeWait = time.Second

// leaderMode is how the main thread of a process to freeze is traced.
type leaderMode int

const (
	// leaderUntraced: not traced; it is seized as the other threads.
	leaderUntraced leaderMode = iota
	// leaderTraced: traced by this thread and running.
	leaderTraced
	// leaderStopped: traced by this thread and stopped (at its exit).
	leaderStopped
)

// held is a thread a freeze stopped.
type held struct {
	tid int
	// seized: the freeze traced it, and detaches it.
	seized bool
	// sig is the signal it stopped to be given, delivered when it goes on.
	sig int
}

// freezer stops the threads of one process; it runs on one OS thread.
type freezer struct {
	pid    int
	mode   leaderMode
	held   []held
	tried  map[int]bool
	frozen Frozen
	// leaderStatus is the traced leader's stop, for its tracer to act
	// on once the others go on.
	leaderStatus *unix.WaitStatus
	// lingering are threads seized that did not stop in time: they must
	// be waited for and detached once they stop.
	lingering []int
}

// Freeze stops every thread of process pid, which mdtrace does not trace,
// calls fn while they are all stopped, and lets them go on, each with the
// signal it stopped for, if any. It returns how long the process was
// stopped. The threads are seized (PTRACE_SEIZE, PTRACE_INTERRUPT) from an
// OS thread of their own, and the list of threads is read again until no
// thread is new; a thread that does not stop within a second is left
// running and counted. If mdtrace dies meanwhile, the kernel lets every
// thread go on.
func Freeze(pid int, fn func(*Frozen) error) (time.Duration, error) {
	type result struct {
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread stays locked: it is the threads' tracer, and
		// dies with the goroutine, after the last one is detached.
		runtime.LockOSThread()
		f := &freezer{pid: pid, mode: leaderUntraced}
		d, err := f.run(fn)
		done <- result{d, err}
		f.waitLingering(true)
	}()
	r := <-done
	return r.d, r.err
}

// run freezes the process, calls fn and resumes the threads seized.
func (f *freezer) run(fn func(*Frozen) error) (time.Duration, error) {
	f.tried = map[int]bool{}
	f.frozen.PID = f.pid
	start := time.Now()
	err := f.stopAll()
	if err == nil {
		for _, h := range f.held {
			st, rerr := threadState(h.tid)
			if rerr != nil {
				f.frozen.Unstopped++
				continue
			}
			f.frozen.Threads = append(f.frozen.Threads, st)
		}
		err = fn(&f.frozen)
	}
	f.resume()
	return time.Since(start), err
}

// stopAll stops the threads, listing them again until none is new.
func (f *freezer) stopAll() error {
	for {
		tids, err := tasks(f.pid)
		if err != nil {
			return fmt.Errorf("process %d: %w", f.pid, ErrProcessGone)
		}
		fresh := false
		for _, tid := range tids {
			if f.tried[tid] {
				continue
			}
			f.tried[tid] = true
			fresh = true
			if err := f.stop(tid); err != nil {
				return err
			}
		}
		if !fresh {
			return nil
		}
	}
}

// stop stops thread tid.
func (f *freezer) stop(tid int) error {
	if tid == f.pid && f.mode == leaderStopped {
		f.held = append(f.held, held{tid: tid})
		return nil
	}
	if tid == f.pid && f.mode == leaderTraced {
		if err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err != nil {
			return fmt.Errorf("process %d: %w", f.pid, ErrProcessGone)
		}
		var ws unix.WaitStatus
		if _, err := wait4(tid, &ws, unix.WALL); err != nil {
			return fmt.Errorf("process %d: %w", f.pid, ErrProcessGone)
		}
		// Whatever stop it is (the interrupt, a signal, its exit),
		// its tracer acts on it once the others go on.
		f.leaderStatus = &ws
		if !ws.Stopped() {
			return fmt.Errorf("process %d: %w", f.pid, ErrProcessGone)
		}
		f.held = append(f.held, held{tid: tid})
		return nil
	}
	switch err := ptrace(unix.PTRACE_SEIZE, tid, 0, callOptions); {
	case errors.Is(err, unix.ESRCH):
		return nil // gone
	case err != nil:
		// Exiting, or traced by another debugger.
		f.frozen.Unstopped++
		return nil
	}
	if err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err != nil {
		// Gone before it could be interrupted: a seized thread that
		// exits needs no detach.
		return nil
	}
	deadline := time.Now().Add(freezeWait)
	for {
		var ws unix.WaitStatus
		wpid, err := wait4(tid, &ws, unix.WALL|unix.WNOHANG)
		switch {
		case err != nil || ws.Exited() && wpid == tid || ws.Signaled() && wpid == tid:
			return nil // gone
		case wpid == tid && ws.Stopped():
			h := held{tid: tid, seized: true}
			if int(ws>>16)&0xff == 0 {
				// Stopped to be given a signal: it gets it
				// when it goes on.
				h.sig = int(ws.StopSignal())
			}
			f.held = append(f.held, h)
			return nil
		}
		if time.Now().After(deadline) {
			f.frozen.Unstopped++
			f.lingering = append(f.lingering, tid)
			return nil
		}
		nap(50 * time.Microsecond)
	}
}

// resume lets the threads seized go on, each with its signal.
func (f *freezer) resume() {
	for _, h := range f.held {
		if h.seized {
			ptrace(unix.PTRACE_DETACH, h.tid, 0, uintptr(h.sig))
		}
	}
	f.held = nil
}

// waitLingering detaches the threads seized that had not stopped, as they
// stop (block: wait for each; else only those stopped now). It returns
// whether none is left.
func (f *freezer) waitLingering(block bool) bool {
	opts := unix.WALL
	if !block {
		opts |= unix.WNOHANG
	}
	left := f.lingering[:0]
	for _, tid := range f.lingering {
		var ws unix.WaitStatus
		wpid, err := wait4(tid, &ws, opts)
		switch {
		case err != nil || wpid == tid && !ws.Stopped():
			// Gone.
		case wpid == tid:
			sig := 0
			if int(ws>>16)&0xff == 0 {
				sig = int(ws.StopSignal())
			}
			ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig))
		default:
			left = append(left, tid)
		}
	}
	f.lingering = left
	return len(left) == 0
}

// tasks lists the threads of process pid.
func tasks(pid int) ([]int, error) {
	d, err := os.Open(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// ReadRanges reads the ranges [start, end) of process pid's memory, with
// process_vm_readv, many ranges a call. A page that cannot be read is
// left zero and counted, as libmemunreachable skips the pages it cannot
// read.
func ReadRanges(pid int, ranges [][2]uint64) (data [][]byte, skippedPages int) {
	const maxIov = 1024
	const page = 4096
	data = make([][]byte, len(ranges))
	for i, r := range ranges {
		data[i] = make([]byte, r[1]-r[0])
	}
	for at := 0; at < len(ranges); at += maxIov {
		end := min(at+maxIov, len(ranges))
		var local []unix.Iovec
		var remote []unix.RemoteIovec
		want := 0
		for i := at; i < end; i++ {
			if len(data[i]) == 0 {
				continue
			}
			v := unix.Iovec{Base: &data[i][0]}
			v.SetLen(len(data[i]))
			local = append(local, v)
			remote = append(remote, unix.RemoteIovec{Base: uintptr(ranges[i][0]), Len: len(data[i])})
			want += len(data[i])
		}
		if want == 0 {
			continue
		}
		if n, err := unix.ProcessVMReadv(pid, local, remote, 0); err == nil && n == want {
			continue
		}
		// Something in the batch could not be read: page by page.
		for i := at; i < end; i++ {
			for off := uint64(0); off < uint64(len(data[i])); {
				addr := ranges[i][0] + off
				n := min(page-addr%page, uint64(len(data[i]))-off)
				if !readMem(pid, addr, data[i][off:off+n]) {
					clear(data[i][off : off+n])
					skippedPages++
				}
				off += n
			}
		}
	}
	return data, skippedPages
}

// freezeRequest is a freeze of one of a Process's tracees, which its
// control goroutine carries out.
type freezeRequest struct {
	pid   int
	fn    func(*Frozen) error
	reply chan freezeReply
}

type freezeReply struct {
	d   time.Duration
	err error
}

// Freeze is the package's Freeze for process pid, traced by p (the
// process or a descendant followed): the freeze runs on p's tracer thread,
// which traces pid's main thread already. Called from a hook at pid's
// exit, it freezes the process there, its main thread stopped at its exit.
// Once p is done, it is the package's Freeze.
func (p *Process) Freeze(pid int, fn func(*Frozen) error) (time.Duration, error) {
	if p.watch != nil {
		// Not traced: the freeze seizes the threads for its moment only.
		return Freeze(pid, fn)
	}
	if unix.Gettid() == p.tracerTID {
		// A hook, on the control goroutine.
		mode := leaderUntraced
		switch {
		case p.atStop == pid:
			mode = leaderStopped
		case p.tracees[pid]:
			return 0, fmt.Errorf("process %d: a freeze from a hook is only at its exit", pid)
		}
		f := &freezer{pid: pid, mode: mode}
		d, err := f.run(fn)
		p.linger(f)
		return d, err
	}
	r := freezeRequest{pid, fn, make(chan freezeReply, 1)}
	switch err := p.send(func() bool { p.serveFreeze(r); return false }, time.After(freezeQueueWait)); err {
	case nil:
		rep := <-r.reply
		return rep.d, rep.err
	case ErrProcessGone:
		return Freeze(pid, fn)
	default:
		// The tracer is in a hook (a process's exit) that waits for
		// what the caller holds.
		return 0, fmt.Errorf("process %d: its tracer is busy with a process's exit", pid)
	}
}

// serveFreeze carries out a freeze request on the control goroutine. The
// main thread's stop, if it was traced, is acted on after the reply, as
// the loop would have: the hooks it may call (the process's exit) may
// need what the requester holds.
func (p *Process) serveFreeze(r freezeRequest) {
	mode := leaderUntraced
	if p.tracees[r.pid] {
		mode = leaderTraced
	}
	f := &freezer{pid: r.pid, mode: mode}
	d, err := f.run(r.fn)
	p.linger(f)
	r.reply <- freezeReply{d, err}
	if f.leaderStatus != nil && p.handle(r.pid, *f.leaderStatus) {
		p.untrace(r.pid)
	}
}

// linger keeps the threads a freeze seized that had not stopped, for the
// loop to detach.
func (p *Process) linger(f *freezer) {
	if len(f.lingering) == 0 {
		return
	}
	if p.lingering == nil {
		p.lingering = &freezer{}
	}
	p.lingering.lingering = append(p.lingering.lingering, f.lingering...)
}
