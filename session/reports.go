//go:build linux

package session

import (
	"fmt"
	"io"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// finishAll writes the exit reports of every process still traced.
func (s *session) finishAll() {
	for _, p := range s.live() {
		s.finish(p)
	}
}

// finish writes the reports that the options ask for at a process's
// exit, once.
func (s *session) finish(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.finished {
		return
	}
	p.finished = true
	s.syncErrors()
	// The stacks the reports read, whole.
	s.syncDeferred()
	if s.rec != nil && s.rec.keep && s.cfg.RecordAllocsOnExit {
		s.rec.WriteProcess(fmt.Sprintf("%s.%d", s.cfg.RecordAllocsFile, p.pid), p.pid)
	}
	if s.flags.Stats {
		s.writeStats(p)
	}
	if s.cfg.Has(options.LogAllocatorStatsOnExit) && s.shim == "" {
		// A preloaded shim logs glibc's statistics itself.
		s.logStats(p)
	}
	live := s.liveView()
	if !s.cfg.Has(options.LeakTrack) && !(s.cfg.Has(options.Backtrace) && s.cfg.BacktraceDumpOnExit) && s.flags.Folded == "" && !live {
		return
	}
	var (
		snap      *leak.Snapshot
		maps      *stacks.Maps
		err       error
		reachable func(*leak.Alloc) bool
	)
	if s.exitCheck() {
		// The check, while the process's memory is there: at its
		// exit stop, or before mdtrace lets it go.
		sc, serr := s.scanUnreachable(p)
		if serr != nil {
			s.notice("checking process %d for unreachable memory: %v; its leak report lists every leaked block", p.pid, serr)
		} else {
			s.log.Infof(p.pid, p.pid, "mdtrace: %s", sc.pauseLine(p.pid))
			snap, maps = sc.snap, sc.maps
			byPtr := make(map[uint64]bool, len(snap.Allocs))
			for i := range snap.Allocs {
				if sc.reachable(i) {
					byPtr[snap.Allocs[i].Ptr] = true
				}
			}
			if early := p.exitScan; early != nil {
				// The check the shim asked for as the process began
				// to exit saw every thread's registers.
				held := make(map[uint64]uint64)
				for i := range early.snap.Allocs {
					if a := &early.snap.Allocs[i]; early.reachable(i) {
						held[a.Ptr] = a.Size
					}
				}
				n := 0
				for i := range snap.Allocs {
					a := &snap.Allocs[i]
					if size, ok := held[a.Ptr]; ok && size == a.Size && !byPtr[a.Ptr] {
						byPtr[a.Ptr] = true
						n++
					}
				}
				if n > 0 {
					s.log.Infof(p.pid, p.pid, "mdtrace: %d blocks reachable as the process began to exit, and not at its exit stop (held by threads exit_group has ended), count as reachable", n)
				}
			}
			reachable = func(a *leak.Alloc) bool { return byPtr[a.Ptr] }
		}
	}
	if snap == nil {
		// Synced above: the probes' stacks and the libraries are read.
		snap, maps, err = s.snapshotSynced(p)
		if err != nil {
			s.notice("%v", err)
			return
		}
	}
	if s.cfg.Has(options.LeakTrack) {
		sum := output.LeakReportWith(s.log, p.prog, p.pid, p.pid, snap, s.frames(p, maps), output.LeakOptions{
			Full:         s.cfg.Has(options.BacktraceFull),
			Suppressed:   s.suppressed(p, maps),
			Progress:     s.reportProgress(p, len(snap.Allocs)),
			Reachable:    reachable,
			ReachableToo: s.flags.UnreachableFirst,
			MaxLeaks:     s.flags.MaxLeaks,
		})
		// The report's bottom line, and the run's for standard error.
		s.log.Errorf(p.pid, p.pid, "mdtrace: %s", sum)
		s.leaks.Blocks += sum.Blocks
		s.leaks.Bytes += sum.Bytes
		s.leaks.SuppressedBlocks += sum.SuppressedBlocks
		s.leaks.SuppressedBytes += sum.SuppressedBytes
		s.leaks.UnreachableOnly = s.leaks.UnreachableOnly || sum.UnreachableOnly
		s.leaks.Classified = s.leaks.Classified || sum.Classified
		s.leaks.ReachableBlocks += sum.ReachableBlocks
		s.leaks.ReachableBytes += sum.ReachableBytes
		s.leaks.UnreachableBlocks += sum.UnreachableBlocks
		s.leaks.UnreachableBytes += sum.UnreachableBytes
		s.leakReports++
		if snap.SampleBytes > 0 && len(snap.Allocs) > 0 {
			_, est := snap.Sites()
			s.notice("sampled one allocation every %d bytes on average: the %d leaked blocks listed stand for about %d blocks, %d bytes",
				snap.SampleBytes, len(snap.Allocs), est.Blocks, est.Bytes)
		}
	}
	if s.cfg.Has(options.Backtrace) && s.cfg.BacktraceDumpOnExit {
		s.writeDump(p, fmt.Sprintf("%s.%d.exit.txt", s.cfg.BacktraceDumpPrefix, p.pid), snap, maps)
	}
	if live {
		s.writeLiveSites(p, snap, maps)
	}
	if s.flags.Folded != "" {
		// The first process's to FILE, any other's to FILE.PID.
		path := s.flags.Folded
		if p.pid != s.pid {
			path = fmt.Sprintf("%s.%d", path, p.pid)
		}
		pid := s.symPID(p)
		line := func(pc uint64) (string, int, bool) { return s.sym.Line(pid, maps, pc) }
		err := output.WriteFileAtomic(path, s.flags.FileMode, func(w io.Writer) error {
			return output.WriteFolded(w, snap, s.frames(p, maps), line)
		})
		if err != nil {
			s.notice("%v", err)
		}
	}
}

// snapshot reads the live table and the maps of a process.
func (s *session) snapshot(p *proc) (*leak.Snapshot, *stacks.Maps, error) {
	s.syncDeferred()
	return s.snapshotSynced(p)
}

// snapshotSynced is snapshot, once the deferred walks and the loader's
// notices are read (syncDeferred).
func (s *session) snapshotSynced(p *proc) (*leak.Snapshot, *stacks.Maps, error) {
	snap, err := s.probes.Snapshot(p.pid)
	if err != nil {
		return nil, nil, err
	}
	snap.BacktraceSize = s.cfg.BacktraceFrames
	snap.SampleBytes = s.sampleBytes
	return snap, s.mapsOf(p), nil
}

// mapsOf returns the maps of process p: as they are, or, once it is gone
// (not held at its exit), as last read; nil if they cannot be read.
func (s *session) mapsOf(p *proc) *stacks.Maps {
	s.pmu.Lock()
	gone, last := p.gone, p.lastMaps
	s.pmu.Unlock()
	if gone {
		return last
	}
	maps, err := stacks.ReadMaps(p.pid)
	if err != nil {
		// The process is gone: frames are printed with what is known.
		return last
	}
	return maps
}

// symPID is the PID the symbolizer reads process p's files through: none
// once it is gone, since its PID may be another process's.
func (s *session) symPID(p *proc) int {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if p.gone {
		return 0
	}
	return p.pid
}

func (s *session) frames(p *proc, maps *stacks.Maps) func([]uint64) []stacks.Frame {
	pid := s.symPID(p)
	return func(pcs []uint64) []stacks.Frame {
		return s.sym.SymbolizeWithHistory(pid, maps, &p.hist, pcs)
	}
}

// dump writes a heap dump of a process's live table now.
func (s *session) dump(p *proc, path string) {
	s.withSnapshot(p, func(snap *leak.Snapshot, maps *stacks.Maps) { s.writeDump(p, path, snap, maps) })
}

// withSnapshot calls fn with a snapshot of p's live table and its maps,
// unless p's exit reports are written.
func (s *session) withSnapshot(p *proc, fn func(*leak.Snapshot, *stacks.Maps)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.finished {
		return
	}
	snap, maps, err := s.snapshot(p)
	if err != nil {
		s.notice("%v", err)
		return
	}
	fn(snap, maps)
}

func (s *session) writeDump(p *proc, path string, snap *leak.Snapshot, maps *stacks.Maps) {
	d := &output.HeapDump{
		Fingerprint:   output.BuildFingerprint(),
		BacktraceSize: s.cfg.BacktraceFrames,
		Snapshot:      snap,
	}
	if s.cfg.Has(options.BacktraceFull) {
		d.BtInfo = s.frames(p, maps)
	}
	if maps != nil {
		d.Maps = maps.Raw
	}
	d.Progress = s.progress(p, "heap dump", "records", path, len(snap.Allocs))
	s.log.Errorf(p.pid, p.pid, "Dumping to file: %s\n", path)
	if err := output.WriteFileAtomic(path, s.flags.FileMode, func(w io.Writer) error { return output.WriteHeapDump(w, d) }); err != nil {
		s.log.Errorf(p.pid, p.pid, "Unable to create file: %s", path)
		if !s.logToStderr {
			fmt.Fprintf(s.stderr, "mdtrace: %v\n", err)
		}
	}
}

// notice reports one of mdtrace's own conditions in the log, and on
// standard error when the log is elsewhere.
func (s *session) notice(format string, args ...any) {
	msg := "mdtrace: " + fmt.Sprintf(format, args...)
	s.log.Errorf(s.pid, s.pid, "%s", msg)
	if !s.logToStderr {
		fmt.Fprintln(s.stderr, msg)
	}
}

// reportLosses reports everything the probes could not record.
func (s *session) reportLosses() {
	c, err := s.probes.Counters()
	if err != nil {
		s.notice("reading the loss counters: %v", err)
		return
	}
	for _, l := range lossLines(c, s.flags.MaxAllocs, s.depth) {
		s.notice("%s", l)
	}
	if s.probeSample {
		s.notice("%s", sampleLine(c, s.sampleBytes))
	}
	if s.injectRouted > 0 && c.UnknownFrees > 0 {
		// Not a loss: what the process freed of its blocks from before.
		fmt.Fprintf(s.stderr, "mdtrace: --inject: %d frees of blocks allocated before the attach (or before the probes went in)\n", c.UnknownFrees)
	}
	d := s.probes.DeferredCounts()
	for _, l := range deferLines(c, d) {
		s.notice("%s", l)
	}
	if c.UnwindDeferred > 0 && s.cfg.Has(options.Verbose) {
		s.notice("%d backtraces reached a library loaded while tracing before its unwind table: %d were finished once it was loaded", c.UnwindDeferred, d.Finished)
	}
	if n := s.probes.UnwindTablesLost(); n > 0 {
		s.notice("%d files' unwind tables did not fit in the room for them: their frames were followed by frame pointers only", n)
	}
	if c.TableFull > 0 {
		// The table makes room as it fills: say why it had none.
		if now, most, err := s.probes.TableRoom(); err != nil {
			s.notice("the live table could not grow: %v", err)
		} else if now < most {
			s.notice("the live table had room for %d blocks of %d: allocations came faster than it grew", now, most)
		}
	}
}

// lossLines describes the non-zero loss counters; depth is the frame
// limit of backtraces.
func lossLines(c tracer.Counters, maxAllocs uint32, depth int) []string {
	var out []string
	add := func(n uint64, format string, args ...any) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, fmt.Sprintf(format, args...)))
		}
	}
	add(c.TableFull, "allocations were not tracked: the live table was full (--max-allocs %d)", maxAllocs)
	add(c.StackFull, "backtraces were lost: the stack table was full")
	add(c.StackCollision, "backtraces were lost to hash collisions in the stack table")
	add(c.StackError, "backtraces could not be taken (the kernel could not walk the stack)")
	add(c.StateError, "allocator calls were missed: no per-thread storage")
	add(c.MissedReturn, "allocator calls were missed: their return was not seen")
	add(c.RecordsLost, "records were lost: the record ring buffer was full")
	add(c.NotifyLost, "library notices were lost: frames of unloaded libraries may stay unnamed")
	add(c.ErrorsLost, "pointer errors were lost: the error ring buffer was full")
	add(c.ProgramLost, "processes running the program were not traced, or not reported: a table or ring buffer was full")
	add(c.GenLost, "programs executed could not be told from the program before: its blocks may be reported with theirs (the table of processes was full)")
	add(c.BatchLost, "batched allocator calls were lost: a thread's batch could not be read (--no-batch reports each call as it is made)")
	add(c.OrphansLost, "frees that came before their block's batch could not be kept for it: those blocks may be reported as leaks")
	add(c.StackTruncated, "backtraces were cut at %d frames with frames left (backtrace=%d, up to 256, for more; marked [truncated] in --folded)", depth, depth)
	add(c.CallsUncounted, "allocator calls were not counted: the table of the processes' counts (16384) was full, and their processes were not given the shim")
	add(c.UnwindStopped, "backtraces end before the outermost frame: a frame the unwind tables could not go past (code outside the files mapped, or a rule mdtrace does not follow)")
	add(c.UnwindNoList, "backtraces may end before the outermost frame: taken before their process's unwind tables were in place, they followed frame pointers alone")
	return out
}

// sampleLine says what the probes' sampling kept: the frees of blocks it
// passed over are no unknown pointers, and not counted as such.
func sampleLine(c tracer.Counters, sampleBytes uint64) string {
	return fmt.Sprintf("sampled %d of %d allocations (one every %d bytes on average, a block of %d bytes or more always): the others took no backtrace and no room in the table; %d frees of blocks not sampled (or allocated before mdtrace) were passed over",
		c.Allocs, c.Allocs+c.Unsampled, sampleBytes, sampleBytes, c.UnsampledFrees)
}

// deferLines says why walks the probes stopped at a library loaded while
// tracing, before its unwind table, were not finished (UnwindStopped
// counts them).
func deferLines(c tracer.Counters, d tracer.DeferCounts) []string {
	var out []string
	add := func(n uint64, why string) {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d of those backtraces reached a library loaded while tracing before its unwind table, and were not finished: %s", n, why))
		}
	}
	add(c.DeferLost, "more than mdtrace finishes at once (256 a CPU a second, about 100 in flight), or no room left to keep them")
	add(d.Short, "they go on past the 16 KB of stack kept to finish them")
	add(d.Gone, "the process was gone before the table was loaded")
	add(d.Stopped, "the table did not let the walk go on")
	return out
}
