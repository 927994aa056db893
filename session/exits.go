//go:build linux

package session

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/tracer"
)

// A followed child's exit reports are written once it is gone, not while
// it is held at its exit stop: a build runs thousands of short processes,
// and each one's parent waits for it. At the stop mdtrace keeps its maps
// (the symbolizer has its files open already, from its exec and its
// loader's notices); the report walks the live table once the process has
// ended, when every block it handed over is in the table: a
// single-threaded process's batch is drained at its exit, before its
// status reaches mdtrace. What needs the process itself keeps the stop:
// the first process, whose exit ends the run, a process with other threads
// (still ending, their batches not drained), the check for unreachable
// memory, --stats, glibc's statistics read from its memory, record_allocs,
// a shim that started before mdtrace was ready (its buffers are read from
// its memory), and a walk of its stack left for mdtrace to finish (its
// maps are read again for it).
type laterExits struct {
	mu sync.Mutex
	// held are the processes seen at their exit stop whose reports wait
	// for them to be gone; writing, those gone whose reports are being
	// written, each with a channel closed once they are.
	held    map[int]*proc
	writing map[int]chan struct{}
	// queue are the processes gone whose reports are to be written; wake
	// tells the writer. The queue has no bound: the ptrace loop, which
	// adds to it, never waits for the writer, which may wait for a report
	// that waits for the loop (a check for unreachable memory).
	queue []*proc
	wake  chan struct{}
	wg    sync.WaitGroup
}

// startLaterExits makes the exit reports of the descendants of a launched
// command wait for their end, written by a goroutine of their own.
func (s *session) startLaterExits() {
	l := &laterExits{held: map[int]*proc{}, writing: map[int]chan struct{}{}, wake: make(chan struct{}, 1)}
	s.later = l
	go func() {
		for range l.wake {
			l.mu.Lock()
			queue := l.queue
			l.queue = nil
			l.mu.Unlock()
			for _, p := range queue {
				s.writeLater(p)
			}
		}
	}()
}

// writeLater writes the reports of p, gone, and forgets it.
func (s *session) writeLater(p *proc) {
	l := s.later
	s.finish(p)
	s.probes.Release(p.pid)
	l.mu.Lock()
	close(l.writing[p.pid])
	delete(l.writing, p.pid)
	l.mu.Unlock()
	l.wg.Done()
}

// exitLater is exiting for a process whose reports can wait for its end:
// it keeps its maps and returns true. False if they cannot wait.
func (s *session) exitLater(p *proc) bool {
	l := s.later
	if l == nil || p.pid == s.pid || s.exitCheck() || s.flags.Stats || s.rec != nil ||
		(s.cfg.Has(options.LogAllocatorStatsOnExit) && s.shim == "") ||
		s.probes.EarlyListed(p.pid) || threads(p.pid) != 1 || !s.walksQuiet(p.pid) {
		return false
	}
	s.keepForEnd(p)
	l.hold(p)
	return true
}

// keepForEnd keeps process p's maps as they are now, for its reports, and
// marks it gone: from now on its PID opens nothing, as it may be another
// process's once p has ended.
func (s *session) keepForEnd(p *proc) {
	s.rememberMaps(p)
	s.pmu.Lock()
	p.gone = true
	s.pmu.Unlock()
}

// hold makes the reports of p wait for its end (gone).
func (l *laterExits) hold(p *proc) {
	l.mu.Lock()
	l.held[p.pid] = p
	l.mu.Unlock()
}

// leaderLeft is the Process's word that process pid's main thread is
// ending alone (pthread_exit) while its other threads run on. mdtrace holds
// a process by its main thread: this one cannot be held at its end. Its
// maps are kept now, while they can still be read whole, and its reports
// are written once it has ended, from the table (each thread's last batch
// is handed over as the thread ends) and those maps: the first process's
// when mdtrace ends, a descendant's as it is gone.
func (s *session) leaderLeft(pid int) {
	p := s.traced(pid)
	if p == nil {
		return
	}
	s.keepForEnd(p)
	s.pmu.Lock()
	p.leaderLeft = true
	first := pid == s.pid
	s.pmu.Unlock()
	var without []string
	if s.exitCheck() {
		without = append(without, "the check for unreachable memory")
	}
	if s.cfg.Has(options.LogAllocatorStatsOnExit) && s.shim == "" {
		without = append(without, "glibc's statistics")
	}
	msg := fmt.Sprintf("process %d (%s): its main thread ended (pthread_exit) while its other threads run on: its reports are written once the whole process has ended, with its maps as they are now (libraries it loads from now on stay unnamed)", pid, strings.TrimSpace(p.prog))
	if len(without) > 0 {
		msg += ", and without " + strings.Join(without, " and ") + ": mdtrace cannot hold a process at its end without its main thread"
	}
	if n := s.probes.EarlyPending(pid); n > 0 {
		// Read from its memory at its end otherwise.
		msg += fmt.Sprintf("; the calls in %d batches its shim kept from before mdtrace was ready count only if their threads hand them over before they end", n)
	}
	s.notice("%s", msg)
	if !first && s.later != nil {
		s.later.hold(p)
	}
}

// gone is the Process's word that process pid has ended: its reports, if
// they waited for it, are written now.
func (s *session) gone(pid int) {
	l := s.later
	if l == nil {
		return
	}
	l.mu.Lock()
	p, ok := l.held[pid]
	if ok {
		delete(l.held, pid)
		l.writing[pid] = make(chan struct{})
		l.wg.Add(1)
		l.queue = append(l.queue, p)
	}
	l.mu.Unlock()
	if ok {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// reported waits until the reports of an earlier process with PID pid,
// gone, are written and its entries forgotten: a new process with its
// PID, forked now, must not lose its own.
func (s *session) reported(pid int) {
	if s.later == nil {
		return
	}
	s.later.mu.Lock()
	done := s.later.writing[pid]
	s.later.mu.Unlock()
	if done != nil {
		<-done
	}
}

// flushExits waits until the reports of every process gone so far are
// written.
func (s *session) flushExits() {
	if s.later != nil {
		s.later.wg.Wait()
	}
}

// threads returns the number of threads of process pid, 0 if it cannot be
// read.
func threads(pid int) int {
	f, err := tracer.StatFields(pid)
	// f[0] is the state (field 3); the number of threads is field 20.
	if err != nil || len(f) < 18 {
		return 0
	}
	n, err := strconv.Atoi(f[17])
	if err != nil {
		return 0
	}
	return n
}
