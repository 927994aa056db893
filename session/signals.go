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
	s.debugSignal(int(sig), s.live())
	return false
}

// pendingSignals acts on the malloc debug signals that came before
// mdtrace began to stop and are still waiting: a heap dump asked for just
// before an interrupt is written. (The Go runtime merges a signal that
// comes again before mdtrace has taken it into one, as the kernel does
// for standard signals: a burst of kill -47 makes fewer dumps of the same
// file, the last one after the last signal.)
func (s *session) pendingSignals(sigs <-chan os.Signal) {
	for {
		select {
		case sig := <-sigs:
			switch sig {
			case unix.SIGINT, unix.SIGTERM, unix.SIGHUP:
			default:
				s.debugSignal(int(sig.(syscall.Signal)), s.live())
			}
		default:
			return
		}
	}
}

// debugSignal acts on one of malloc debug's signals for the processes
// procs, as Android does when the signal reaches the process.
func (s *session) debugSignal(sig int, procs []*proc) {
	switch sig {
	case options.BacktraceDumpSignal:
		if !s.cfg.Has(options.Backtrace) {
			s.notice("signal %d ignored: heap dumps need the backtrace option", sig)
			return
		}
		for _, p := range procs {
			s.dump(p, fmt.Sprintf("%s.%d.txt", s.cfg.BacktraceDumpPrefix, p.pid))
		}
	case options.RecordAllocsSignal:
		if s.rec == nil {
			s.notice("signal %d ignored: writing records needs the record_allocs option", sig)
			return
		}
		s.rec.WriteAll(s.cfg.RecordAllocsFile, s.pid, true)
	case options.BacktraceEnableSignal:
		if !s.cfg.BacktraceEnableOnSignal {
			s.notice("signal %d ignored: toggling backtraces needs the backtrace_enable_on_signal option", sig)
			return
		}
		s.mu.Lock()
		s.btOn = !s.btOn
		on := s.btOn
		s.mu.Unlock()
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
			return
		}
		s.mu.Lock()
		for _, p := range procs {
			s.logStats(p)
		}
		s.mu.Unlock()
	case options.CheckUnreachableSignal:
		if !s.cfg.Has(options.CheckUnreachableOnSignal) {
			s.notice("signal %d ignored: checking for unreachable memory needs the check_unreachable_on_signal option", sig)
			return
		}
		for _, p := range procs {
			s.checkUnreachable(p)
		}
	default:
		s.notice("signal %d ignored: its option is not supported yet", sig)
	}
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
	snap.SampleBytes = s.flags.SampleBytes
	buf, overall, infoSize, total, btSize = snap.LeakInfo()
	return abi.CtlStatusOK, buf, overall, infoSize, total, btSize
}
