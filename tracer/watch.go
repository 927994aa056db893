//go:build linux

package tracer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/bpf"
)

// Watcher tells what ptrace would of a process that mdtrace attached to
// without holding it: its execs, and how it ended. Probes is one, with the
// kernel's exec and exit tracepoints.
type Watcher interface {
	// Watch starts watching process pid, before anything can be missed.
	Watch(pid int) error
	// ExecGen changes each time process pid executes a program.
	ExecGen(pid int) uint32
	// Ended returns how process pid ended, once it is gone; ok is
	// false when that was not seen.
	Ended(pid int) (st ExitStatus, ok bool)
	// Unwatch stops watching process pid.
	Unwatch(pid int)
}

// Watch enters process pid in the processes whose end the exit
// tracepoint records (watch_exit), attached the first time.
func (p *Probes) Watch(pid int) error {
	if err := p.objs.Watched.Put(uint32(pid), bpf.MdtraceWatchState{}); err != nil {
		return fmt.Errorf("watching process %d: %w", pid, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watchLink != nil {
		return nil
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exit", Program: p.objs.WatchExit})
	if err != nil {
		p.objs.Watched.Delete(uint32(pid))
		return fmt.Errorf("attaching the process exit tracepoint: %w", err)
	}
	p.watchLink = l
	return nil
}

// ExecGen returns the gen of process pid's program (see gens.go), which
// the exec tracepoint changes at each exec.
func (p *Probes) ExecGen(pid int) uint32 {
	gen, _ := p.currentGen(pid)
	return gen
}

// Ended returns how watched process pid ended, as its parent's wait(2)
// learns it.
func (p *Probes) Ended(pid int) (ExitStatus, bool) {
	var w bpf.MdtraceWatchState
	if err := p.objs.Watched.Lookup(uint32(pid), &w); err != nil || w.Ended == 0 {
		return ExitStatus{}, false
	}
	return statusOf(unix.WaitStatus(w.Code)), true
}

// Unwatch forgets process pid's end.
func (p *Probes) Unwatch(pid int) {
	p.objs.Watched.Delete(uint32(pid))
}

// watchPoll is how often the control goroutine of a process not held
// looks for an exec and a request to detach while it waits for the end.
const watchPoll = 100 // ms

// watchStart watches process pid, then opens its pidfd, so that an end
// the pidfd tells is one the Watcher saw.
func (p *Process) watchStart(pid int) error {
	if err := p.watch.Watch(pid); err != nil {
		return err
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		p.watch.Unwatch(pid)
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("process %d: %w", pid, ErrProcessGone)
		}
		return fmt.Errorf("process %d: opening a pidfd: %w", pid, err)
	}
	p.pidfd = fd
	return nil
}

// unwatch stops watching the process.
func (p *Process) unwatch() {
	p.watch.Unwatch(p.PID)
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// watchLoop waits for the end of a process not held: its pidfd becomes
// readable once every thread of it has ended (the exit tracepoint has run
// for each). An exec is seen as the gen of its program changes; it is
// told after the fact.
func (p *Process) watchLoop() {
	defer p.unwatch()
	gen := p.watch.ExecGen(p.PID)
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	for {
		select {
		case r := <-p.reqq:
			if r() {
				return
			}
			continue
		default:
		}
		n, err := unix.Poll(fds, watchPoll)
		if err != nil && !errors.Is(err, unix.EINTR) {
			// A pidfd cannot fail to poll; should it, the
			// process is taken for gone rather than waited for
			// forever.
			n = 1
		}
		if g := p.watch.ExecGen(p.PID); g != gen {
			gen = g
			if p.hooks.Exec != nil {
				p.hooks.Exec(p.PID)
			}
		}
		if n > 0 {
			st, ok := p.watch.Ended(p.PID)
			if !ok {
				st = ExitStatus{Unseen: true}
			}
			p.status = st
			if p.hooks.Exit != nil {
				p.hooks.Exit(p.PID)
			}
			return
		}
	}
}
