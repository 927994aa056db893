//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// runProgram is program mode (--program NAME), Android's
// libc.debug.malloc.program: every process that executes a program whose
// file name contains NAME is traced from its first instruction until it
// exits, with its own reports, and so are its children. The probes on the
// system's libc have no PID filter, so that no early allocation is missed;
// the kernel's exec tracepoint picks the processes that count. Each one is
// then held at its exit with ptrace, as in attach mode, for its reports.
func (s *session) runProgram(sigs chan os.Signal) (int, error) {
	lib, err := tracer.AllocatorOfFile(auditShell, os.Environ())
	if err != nil {
		return 1, fmt.Errorf("finding the system's libc: %w", err)
	}
	s.systemLib = lib
	s.programPaths = map[int]string{}
	// The probes first, then the exec tracepoint: a process matched is
	// probed from its first allocation.
	if err := partialAttach(s.probes.Attach(0, lib), func(msg string) { s.notice("%s", msg) }); err != nil {
		return 1, err
	}
	execs, err := s.probes.WatchPrograms()
	if err != nil {
		return 1, err
	}
	if s.flags.ReadyFile != "" {
		if err := writeReadyFile(s.flags.ReadyFile, os.Getpid()); err != nil {
			execs.Close()
			return 1, err
		}
	}
	fmt.Fprintf(s.stderr, "mdtrace: tracing every process that runs a program whose name contains %q (with %s); interrupt to stop\n", s.flags.Program, lib)
	s.start = time.Now()

	matched := make(chan tracer.ProgramExec, 64)
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		defer close(matched)
		for {
			ev, err := execs.Next(time.Now().Add(time.Second))
			switch {
			case errors.Is(err, tracer.ErrNoRecord):
				continue
			case err != nil:
				return
			}
			matched <- ev
		}
	}()

	var (
		roots    []*tracer.Process
		rootsMu  sync.Mutex
		adopters sync.WaitGroup
		tick     <-chan time.Time
	)
	if s.flags.Interval > 0 {
		t := time.NewTicker(s.flags.Interval)
		defer t.Stop()
		tick = t.C
	}
	interrupted := syscall.Signal(0)
	for interrupted == 0 {
		select {
		case ev, ok := <-matched:
			if !ok {
				matched = nil
				continue
			}
			if ev.Parent != 0 && !s.forkedUnheld(ev) {
				continue
			}
			s.pmu.Lock()
			if ev.Path == "" {
				ev.Path = s.programPaths[ev.Parent]
			}
			s.programPaths[ev.PID] = ev.Path
			s.pmu.Unlock()
			// Each process is adopted on its own, so that a slow
			// one does not delay the next one's hold.
			adopters.Add(1)
			go func() {
				defer adopters.Done()
				if p := s.adopt(ev); p != nil {
					rootsMu.Lock()
					roots = append(roots, p)
					rootsMu.Unlock()
				}
			}()
		case <-tick:
			s.periodic()
		case sig := <-sigs:
			if s.handleSignal(sig.(syscall.Signal)) {
				interrupted = sig.(syscall.Signal)
			}
		}
	}
	s.pendingSignals(sigs)
	execs.Close()
	// The reader may be waiting to hand over a match: take what is left
	// until it has stopped.
	for matched != nil {
		if _, ok := <-matched; !ok {
			matched = nil
		}
	}
	readers.Wait()
	adopters.Wait()
	// The processes run on: their reports are written now, as when
	// tracing an attached process is interrupted.
	s.finishAll()
	for _, p := range roots {
		if err := p.Detach(); err != nil {
			s.notice("%v", err)
		}
		p.Wait()
	}
	s.probes.Detach()
	s.reportLosses()
	s.bottomLine()
	return 0, nil
}

// adopt starts following a process that executed a matching program: it
// is held at its exit from now on, and its forks are followed. A process
// that a followed one executed is followed already.
func (s *session) adopt(ev tracer.ProgramExec) *tracer.Process {
	if s.traced(ev.PID) != nil {
		return nil
	}
	hooks := tracer.Hooks{Ready: s.readyProgram, Exit: s.exiting, Exec: s.execedProgram, Fork: s.forked,
		LeaderLeft: s.leaderLeft, Gone: s.goneProgram}
	p, err := tracer.Attach(ev.PID, hooks)
	if err == nil {
		return p
	}
	if s.traced(ev.PID) == nil {
		// It exited before it could be held: its reports come from
		// the table, with the frames that can be named without its maps.
		if errors.Is(err, tracer.ErrProcessGone) || !processAlive(ev.PID) {
			pr := &proc{pid: ev.PID, prog: ev.Path}
			s.notice("process %d (%s) exited before mdtrace could hold it: its frames cannot be named", ev.PID, pr.prog)
			s.finish(pr)
		} else {
			s.notice("process %d (%s): %v", ev.PID, ev.Path, err)
		}
		if err := s.probes.Forget(ev.PID); err != nil {
			s.notice("%v", err)
		}
		s.dropProgramProc(ev.PID)
	}
	return nil
}

// forkedUnheld handles the fork of a traced process in the order of
// events: it reports whether the child must be adopted, because its
// parent was not held yet when it forked. A child forked by a held parent
// is held already, and followed through its parent. Otherwise the child
// is a zygote child whose table starts with a copy of its parent's, as it
// is now: the parent's blocks freed since the fork are missing from it,
// and those allocated since are in it.
func (s *session) forkedUnheld(ev tracer.ProgramExec) bool {
	if tracedByMdtrace(ev.PID) {
		return false
	}
	if err := s.probes.Fork(ev.Parent, ev.PID, true); err != nil {
		s.notice("%v", err)
	}
	return true
}

// tracedByMdtrace reports whether one of mdtrace's threads traces process
// pid with ptrace.
func tracedByMdtrace(pid int) bool {
	v, _ := statusField(pid, "TracerPid")
	// The tracer is a thread.
	tid, _ := strconv.Atoi(v)
	if tid == 0 {
		return false
	}
	_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid))
	return err == nil
}

// processAlive reports whether pid is a process that has not exited: not
// gone, not a zombie.
func processAlive(pid int) bool {
	f, err := tracer.StatFields(pid)
	if err != nil || len(f) == 0 {
		return false
	}
	// A process whose main thread has ended runs on in its others.
	return f[0] != "Z" && f[0] != "X" || f[0] == "Z" && stacks.LiveTask(pid) != ""
}

// readyProgram starts tracing a matched process, which runs on: it is
// probed through the system's libc already, and its own allocator is
// probed too when it has another.
func (s *session) readyProgram(pid int) error {
	prog := tracer.ProgName(pid)
	p := &proc{pid: pid, prog: prog}
	s.pmu.Lock()
	s.procs[pid] = p
	s.pmu.Unlock()
	lib, err := tracer.AllocatorOfExec(pid)
	if err != nil {
		s.notice("process %d (%s): %v; only its calls into %s are tracked", pid, prog, err, s.systemLib)
		lib = s.systemLib
	}
	if !stacks.SameFile(lib, s.systemLib) {
		s.notice("process %d (%s) allocates with %s: probed from now on, its earlier allocations are not tracked", pid, prog, lib)
	}
	if err := s.attach(p, lib); err != nil {
		return err
	}
	s.watchImage(p, false)
	fmt.Fprintf(s.stderr, "mdtrace: tracing process %d (%s)\n", pid, prog)
	s.logVerbose(p)
	return nil
}

// execedProgram follows a traced process into a new program, which is
// traced only if its name matches too; otherwise the old program's blocks
// are gone with it and nothing more is reported of the process.
func (s *session) execedProgram(pid int) {
	if s.probes.IsTraced(pid) {
		s.execed(pid)
		return
	}
	p := s.traced(pid)
	if p == nil {
		return
	}
	s.mu.Lock()
	p.finished = true
	s.mu.Unlock()
	if err := s.probes.Forget(pid); err != nil {
		s.notice("%v", err)
	}
	fmt.Fprintf(s.stderr, "mdtrace: process %d executed %s, which does not match: no longer traced\n", pid, tracer.ProgName(pid))
	s.dropProgramProc(pid)
}

// dropProgramProc forgets a process of program mode that has exited or
// left the program: its PID may come back as another process.
// goneProgram writes the reports of a process that ended after its main
// thread (leaderLeft), which the Exit hook never saw.
func (s *session) goneProgram(pid int) {
	p := s.traced(pid)
	if p == nil {
		return
	}
	s.pmu.Lock()
	left := p.leaderLeft
	s.pmu.Unlock()
	if !left {
		return
	}
	s.finish(p)
	s.probes.Release(pid)
	s.dropProgramProc(pid)
}

func (s *session) dropProgramProc(pid int) {
	s.probes.Untrace(pid)
	s.pmu.Lock()
	delete(s.procs, pid)
	delete(s.programPaths, pid)
	s.pmu.Unlock()
}
