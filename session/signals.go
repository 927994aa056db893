//go:build linux

package session

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/tracer"
)

// handleSignal acts on a signal sent to mdtrace; it reports whether mdtrace
// should stop. The malloc debug signals act on every process traced.
func (s *session) handleSignal(sig syscall.Signal) bool {
	switch sig {
	case unix.SIGINT, unix.SIGTERM, unix.SIGHUP:
		return true
	}
	if s.sigCount != nil && int(sig) != options.BacktraceEnableSignal {
		// Toggles that came before take effect first, as in a process
		// that takes its signals one at a time: a heap dump asked for
		// after them finds them applied.
		s.countedSignal(options.BacktraceEnableSignal, s.signalsCame(options.BacktraceEnableSignal))
	}
	s.countedSignal(int(sig), s.signalsCame(int(sig)))
	return false
}

// countSignals starts counting the malloc debug signals sent to mdtrace;
// without the count, they are acted on once for each time the Go runtime
// passes them on, which merges those that come faster than mdtrace takes
// them, and the log says so.
func (s *session) countSignals() {
	c, err := tracer.CountSignals(os.Getpid(), options.BacktraceEnableSignal, options.LogAllocatorStatsSignal)
	if err != nil {
		s.notice("%v; signals %d to %d that come faster than mdtrace takes them are merged, and their number is not known",
			err, options.BacktraceEnableSignal, options.LogAllocatorStatsSignal)
		return
	}
	s.sigCount = c
}

// signalsCame is how many times malloc debug signal sig came since it was
// last acted on: 0 when an earlier one was acted on for it, more than one
// when the Go runtime merged them; 1 without a count.
func (s *session) signalsCame(sig int) uint64 {
	i := sig - options.BacktraceEnableSignal
	if s.sigCount == nil || i < 0 || i >= len(s.sigSeen) {
		return 1
	}
	n, err := s.sigCount.Count(sig)
	if err != nil {
		s.notice("%v", err)
		return 1
	}
	came := n - s.sigSeen[i]
	s.sigSeen[i] = n
	return came
}

// countedSignal acts on malloc debug signal sig, which came n times: once
// for them all (a toggle of backtraces as many times as it came), and
// the log says when they were more than one.
func (s *session) countedSignal(sig int, n uint64) {
	if n == 0 {
		return
	}
	if sig == options.BacktraceEnableSignal && s.cfg.BacktraceEnableOnSignal && n%2 == 0 {
		s.notice("signal %d came %d times while mdtrace was busy: backtraces toggled %d times, left as they were", sig, n, n)
		return
	}
	if !s.debugSignal(sig, s.live()) || n == 1 {
		return
	}
	what := map[int]string{
		options.BacktraceEnableSignal:   "backtraces toggled once for them",
		options.RecordAllocsSignal:      "one write of the records for them",
		options.BacktraceDumpSignal:     "one heap dump for them",
		options.CheckUnreachableSignal:  "one check for unreachable memory for them",
		options.LogAllocatorStatsSignal: "one log of the allocator stats for them",
	}[sig]
	s.notice("signal %d came %d times while mdtrace was busy: %s", sig, n, what)
}

// pendingSignals acts on the malloc debug signals that came before
// mdtrace began to stop and are still waiting: a heap dump asked for just
// before an interrupt is written. The counts find those the Go runtime
// has not passed on yet.
func (s *session) pendingSignals(sigs <-chan os.Signal) {
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case unix.SIGINT, unix.SIGTERM, unix.SIGHUP:
			default:
				s.handleSignal(sig.(syscall.Signal))
			}
		default:
			if s.sigCount != nil {
				for sig := options.BacktraceEnableSignal; sig <= options.LogAllocatorStatsSignal; sig++ {
					s.countedSignal(sig, s.signalsCame(sig))
				}
			}
			return
		}
	}
}

// handleUncounted acts on the signals pre took while a command started
// early ran and the signal counter was not loaded yet, each at least once
// (the count has not seen those that came before it), and returns the one
// that ends the run, if one came. A signal pre took after the counter was
// loaded may be on the session's channel too: acted on here, its count is
// taken, and it is not acted on again.
func (s *session) handleUncounted(pre <-chan os.Signal) syscall.Signal {
	for {
		select {
		case sig := <-pre:
			n := sig.(syscall.Signal)
			switch n {
			case unix.SIGINT, unix.SIGTERM, unix.SIGHUP:
				return n
			}
			s.countedSignal(int(n), max(s.signalsCame(int(n)), 1))
		default:
			return 0
		}
	}
}

// debugSignal acts on one of malloc debug's signals for the processes
// procs, as Android does when the signal reaches the process. It reports
// false when the signal is ignored (its option is off), which it says.
func (s *session) debugSignal(sig int, procs []*proc) bool {
	switch sig {
	case options.BacktraceDumpSignal:
		if !s.cfg.Has(options.Backtrace) {
			s.notice("signal %d ignored: heap dumps need the backtrace option", sig)
			return false
		}
		for _, p := range procs {
			s.dump(p, fmt.Sprintf("%s.%d.txt", s.cfg.BacktraceDumpPrefix, p.pid))
		}
	case options.RecordAllocsSignal:
		if s.rec == nil || !s.rec.keep {
			s.notice("signal %d ignored: writing records needs the record_allocs option", sig)
			return false
		}
		s.rec.WriteAll(s.cfg.RecordAllocsFile, s.pid, true)
	case options.BacktraceEnableSignal:
		if !s.cfg.BacktraceEnableOnSignal {
			s.notice("signal %d ignored: toggling backtraces needs the backtrace_enable_on_signal option", sig)
			return false
		}
		on := !s.btOn.Load()
		s.btOn.Store(on)
		if err := s.probes.SetBacktrace(on); err != nil {
			s.notice("toggling backtraces: %v", err)
		}
		// The shim's batched allocations: from their next one.
		if s.shim != "" {
			for _, p := range procs {
				if err := tracer.SetShimBacktrace(p.pid, s.shim, on); err != nil {
					s.notice("toggling backtraces: %v", err)
				}
			}
		}
	case options.LogAllocatorStatsSignal:
		if !s.cfg.Has(options.LogAllocatorStatsOnSignal) {
			s.notice("signal %d ignored: logging allocator stats needs the log_allocator_stats_on_signal option", sig)
			return false
		}
		s.mu.Lock()
		for _, p := range procs {
			s.logStats(p)
		}
		s.mu.Unlock()
	case options.CheckUnreachableSignal:
		if !s.cfg.Has(options.CheckUnreachableOnSignal) {
			s.notice("signal %d ignored: checking for unreachable memory needs the check_unreachable_on_signal option", sig)
			return false
		}
		for _, p := range procs {
			s.checkUnreachable(p, s.flags.UnreachableContents)
		}
	default:
		s.notice("signal %d ignored: its option is not supported yet", sig)
		return false
	}
	return true
}

// signal is a malloc debug signal that reached a shimmed process, which
// passed it on: it acts on that process.
func (s *session) Signal(pid, sig int) {
	if p := s.traced(pid); p != nil {
		s.debugSignal(sig, []*proc{p})
	}
}

// leakInfo answers the shim's get_malloc_leak_info for process pid.
func (s *session) LeakInfo(pid int) (status uint32, buf []byte, overall, infoSize, total, btSize uint64) {
	if !s.cfg.Has(options.Backtrace) {
		return abi.CtlStatusNotTracked, nil, 0, 0, 0, 0
	}
	snap, err := s.probes.Snapshot(pid)
	if err != nil {
		s.notice("get_malloc_leak_info of process %d: %v", pid, err)
		return abi.CtlStatusOK, nil, 0, 0, 0, 0
	}
	snap.BacktraceSize = s.cfg.BacktraceFrames
	snap.SampleBytes = s.sampleBytes
	buf, overall, infoSize, total, btSize = snap.LeakInfo()
	return abi.CtlStatusOK, buf, overall, infoSize, total, btSize
}
