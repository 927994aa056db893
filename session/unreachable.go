//go:build linux

package session

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
	"github.com/mdtrace/mdtrace/unreach"
)

// unreachScan is a reachability check of one process: its live table and
// maps as they were while it was stopped, a copy of its roots and heap,
// and each block's verdict.
type unreachScan struct {
	snap *leak.Snapshot
	maps *stacks.Maps
	img  *unreach.Image
	res  *unreach.Result
	// block is the index in img.Blocks of each of snap.Allocs.
	block []int
	// byBlock is the inverse of block, made when needed.
	byBlock []int
	pause   time.Duration
	// threads and unstopped count the threads stopped and those that
	// could not be; rootBytes and heapBytes what was read.
	threads, unstopped   int
	rootBytes, heapBytes int
	skipped, outside     int
	// allocMaps says why the allocator's own mappings are read as roots
	// where they may be; "" if they are not.
	allocMaps string
	// late: the process ran before mdtrace attached, and its heap outside
	// the blocks mdtrace knows was read as roots.
	late bool
}

// reachable reports whether snap.Allocs[i] is reachable.
func (sc *unreachScan) reachable(i int) bool { return sc.res.Reachable[sc.block[i]] }

// scanUnreachable stops process p, takes its live table, its maps and a
// copy of its roots and heap, lets it go on, and marks the blocks
// reachable from the roots.
func (s *session) scanUnreachable(p *proc) (*unreachScan, error) {
	s.pmu.Lock()
	gone := p.gone
	s.pmu.Unlock()
	if gone {
		return nil, fmt.Errorf("process %d has no main thread or memory left to read", p.pid)
	}
	s.syncLibraries()
	sc := &unreachScan{}
	shim := shimName
	if s.flags.Shim != "" {
		shim = filepath.Base(s.flags.Shim)
	}
	fn := func(fz *tracer.Frozen) error {
		snap, err := s.probes.Snapshot(p.pid)
		if err != nil {
			return err
		}
		snap.BacktraceSize = s.cfg.BacktraceFrames
		snap.SampleBytes = s.sampleBytes
		maps, err := stacks.ReadMaps(p.pid)
		if err != nil {
			return fmt.Errorf("reading the maps of process %d: %w", p.pid, err)
		}
		sc.snap, sc.maps = snap, maps
		sc.threads, sc.unstopped = len(fz.Threads), fz.Unstopped
		order := make([]int, len(snap.Allocs))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			pa, pb := snap.Allocs[a].Ptr, snap.Allocs[b].Ptr
			switch {
			case pa < pb:
				return -1
			case pa > pb:
				return 1
			}
			return 0
		})
		img := &unreach.Image{Blocks: make([]unreach.Block, len(order))}
		sc.block = make([]int, len(order))
		for bi, ai := range order {
			a := &snap.Allocs[ai]
			img.Blocks[bi] = unreach.Block{Ptr: a.Ptr, Size: a.Size}
			sc.block[ai] = bi
		}
		var sps []uint64
		for _, t := range fz.Threads {
			sps = append(sps, t.SP)
			img.Regs = append(img.Regs, t.Regs...)
		}
		s.pmu.Lock()
		late := p.late
		s.pmu.Unlock()
		known := unreach.Known{
			Addrs: s.probes.BatchAddrs(p.pid),
			File:  func(path string) bool { return filepath.Base(path) == shim },
			Late:  late,
		}
		own, err := s.probes.AllocatorMappings(p.pid)
		for _, r := range own {
			known.Allocator = append(known.Allocator, unreach.Range{Start: r[0], End: r[1]})
		}
		sc.allocMaps = allocMapsNote(p, err)
		layout := unreach.Classify(maps.Mappings, sps, img.Blocks, known)
		sc.outside, sc.late = layout.Outside, late
		var ranges [][2]uint64
		for _, group := range [][]unreach.Range{layout.Globals, layout.Stacks, layout.Runs} {
			for _, r := range group {
				ranges = append(ranges, [2]uint64{r.Start, r.End})
			}
		}
		data, skipped := tracer.ReadRanges(p.pid, ranges)
		sc.skipped = skipped
		nroots := len(layout.Globals) + len(layout.Stacks)
		for i, r := range ranges {
			seg := unreach.Segment{Addr: r[0], Data: data[i]}
			if i < nroots {
				img.Roots = append(img.Roots, seg)
				sc.rootBytes += len(data[i])
			} else {
				img.Heap = append(img.Heap, seg)
				sc.heapBytes += len(data[i])
			}
		}
		sc.img = img
		return nil
	}
	var err error
	if s.proc != nil {
		sc.pause, err = s.proc.Freeze(p.pid, fn)
	} else {
		sc.pause, err = tracer.Freeze(p.pid, fn)
	}
	if err != nil {
		return nil, err
	}
	// glibc's next-chunk addresses, from each block's header.
	img := sc.img
	j := 0
	for i := range img.Blocks {
		b := &img.Blocks[i]
		for j < len(img.Heap) && img.Heap[j].End() <= b.Ptr {
			j++
		}
		if j < len(img.Heap) && b.Ptr >= img.Heap[j].Addr+8 {
			seg := &img.Heap[j]
			off := b.Ptr - 8 - seg.Addr
			h := uint64(0)
			for k := range uint64(8) {
				h |= uint64(seg.Data[off+k]) << (8 * k)
			}
			b.NotRef = unreach.GlibcNotRef(b.Ptr, b.Size, h)
		}
	}
	sc.res = unreach.Mark(img)
	return sc, nil
}

// pauseLine says how long the process was stopped and what was read.
func (sc *unreachScan) pauseLine(pid int) string {
	line := fmt.Sprintf("process %d stopped %.1f ms for the check of its %d blocks: %d threads, %d bytes of roots and %d bytes of heap read",
		pid, float64(sc.pause.Microseconds())/1000, len(sc.img.Blocks), sc.threads, sc.rootBytes, sc.heapBytes)
	if sc.unstopped > 0 {
		line += fmt.Sprintf("; %d threads could not be stopped (their registers are not roots)", sc.unstopped)
	}
	if sc.outside > 0 {
		line += fmt.Sprintf("; %d blocks lie outside the readable memory (their contents are not scanned)", sc.outside)
	}
	if sc.late {
		line += "; the heap outside the blocks made since mdtrace attached is read as roots (blocks from before it may hold the addresses of newer ones): a lost block may look reachable"
	}
	if sc.allocMaps != "" {
		line += "; " + sc.allocMaps
	}
	return line
}

// allocMapsNote says where the memory process p's allocator mapped for
// itself may be read as roots, and so leaks seen as reachable: where the
// probes could not follow its mappings (err), or, for an allocator other
// than glibc's (whose own memory is its arenas' heaps, known by their
// shape), what it mapped before mdtrace attached.
func allocMapsNote(p *proc, err error) string {
	glibc := len(p.libs) > 0
	for _, f := range p.libs {
		glibc = glibc && stacks.IsLibc(f.Name)
	}
	switch {
	case err != nil && !glibc:
		return fmt.Sprintf("the memory its allocator maps for itself is not known (%v): read as roots, its records of blocks may make lost ones look reachable", err)
	case p.late && !glibc:
		return "the memory its allocator mapped for itself before mdtrace attached is read as roots: its records of blocks may make lost ones look reachable"
	}
	return ""
}

// checkUnreachable runs the check of check_unreachable_on_signal on
// process p now, and logs it as Android's malloc debug and
// libmemunreachable do, each leak with its first bytes if contents is
// set.
func (s *session) checkUnreachable(p *proc, contents bool) {
	s.runUnreachable(p, contents, true)
}

// errFinished is the error of a check of a process whose exit reports are
// written: its memory is gone.
var errFinished = errors.New("the process has exited")

// runUnreachable runs a check of process p now and logs it: the steps and
// the summary, and each leak if logLeaks is set. It returns the report and
// how to name its frames.
//
// The log is written under the session's lock, but the scan is not: the
// process's exit, which takes the lock, may come while it is stopped.
func (s *session) runUnreachable(p *proc, contents, logLeaks bool) (*unreach.Report, func([]uint64) []stacks.Frame, error) {
	s.mu.Lock()
	finished := p.finished
	s.mu.Unlock()
	if finished {
		return nil, nil, fmt.Errorf("process %d: %w", p.pid, errFinished)
	}
	sc, err := s.scanUnreachable(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	ul := s.log.Tagged(output.UnreachableTag)
	steps := output.UnreachableSteps
	s.log.Infof(p.pid, p.pid, "Starting to check for unreachable memory.")
	ul.Infof(p.pid, p.pid, steps.Collecting, p.pid)
	ul.Infof(p.pid, p.pid, steps.Searching, p.pid)
	if err != nil {
		s.log.Errorf(p.pid, p.pid, "Unreachable check failed, run setenforce 0 and try again.")
		s.notice("checking process %d for unreachable memory: %v", p.pid, err)
		return nil, nil, err
	}
	ul.Infof(p.pid, p.pid, "%s", steps.SearchDone)
	ul.Infof(p.pid, p.pid, "%s", steps.CollectionDone)
	s.log.Infof(p.pid, p.pid, "mdtrace: %s", sc.pauseLine(p.pid))
	if sc.skipped > 0 {
		ul.Errorf(p.pid, p.pid, "%d pages skipped due to segfaults", sc.skipped)
	}
	ul.Infof(p.pid, p.pid, steps.Sweeping, p.pid)
	ul.Infof(p.pid, p.pid, "%s", steps.SweepDone)
	ul.Infof(p.pid, p.pid, "%s", steps.Folding)
	folded := unreach.Fold(sc.img, sc.res)
	backtrace := func(bi int) []uint64 { return sc.snap.Backtrace(sc.allocOf(bi)) }
	report := unreach.Summarize(sc.img, sc.res, folded, unreach.DefaultLimit, backtrace,
		func(bi int) []byte { return unreach.Data(sc.img, bi) })
	ul.Infof(p.pid, p.pid, "%s", steps.FoldDone)
	ul.Infof(p.pid, p.pid, "%s", steps.Done)
	frames := s.frames(p, sc.maps)
	if logLeaks {
		output.LogUnreachable(s.log, p.pid, p.pid, report, contents, frames)
	} else {
		ul.Errorf(p.pid, p.pid, "%s", output.UnreachableSummary(report))
	}
	return report, frames, nil
}

// allocOf returns the allocation of block bi.
func (sc *unreachScan) allocOf(bi int) *leak.Alloc {
	if sc.byBlock == nil {
		sc.byBlock = make([]int, len(sc.block))
		for ai, b := range sc.block {
			sc.byBlock[b] = ai
		}
	}
	return &sc.snap.Allocs[sc.byBlock[bi]]
}

// Unreachable checks process pid now for another mdtrace (mdtrace
// unreachable -p PID), which asked on the control socket: it logs the
// check's steps and summary, and answers with libmemunreachable's report.
func (s *session) Unreachable(pid int, contents bool) (uint32, []byte) {
	p := s.traced(pid)
	if p == nil {
		return abi.CtlStatusNotTraced, nil
	}
	s.mu.Lock()
	s.log.Infof(p.pid, p.pid, "mdtrace: checking for unreachable memory, asked by mdtrace unreachable")
	s.mu.Unlock()
	report, frames, err := s.runUnreachable(p, contents, false)
	if err != nil {
		return abi.CtlStatusFailed, []byte(err.Error())
	}
	return abi.CtlStatusOK, []byte(output.UnreachableString(report, contents, frames))
}

// exitCheck reports whether the leak report at exit needs a check for
// unreachable memory.
func (s *session) exitCheck() bool {
	return s.cfg.Has(options.LeakTrack) && (s.flags.UnreachableOnly || s.flags.UnreachableFirst)
}

// Exiting takes the check for unreachable memory at exit of process pid
// now: its shim's last destructor asks, while every thread still runs. At
// the exit stop, exit_group has ended the other threads and their
// registers are gone; the report counts as reachable a block that either
// check found reachable.
func (s *session) Exiting(pid int) {
	p := s.traced(pid)
	if p == nil || !s.exitCheck() {
		return
	}
	s.mu.Lock()
	finished := p.finished
	s.mu.Unlock()
	s.pmu.Lock()
	gone := p.gone
	s.pmu.Unlock()
	if finished || gone {
		// Gone from under mdtrace (its main thread ended alone, as
		// leaderLeft said): nothing to read it through.
		return
	}
	sc, err := s.scanUnreachable(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.notice("checking process %d for unreachable memory as it exits: %v; the check at its exit stop alone counts", p.pid, err)
		return
	}
	s.log.Infof(p.pid, p.pid, "mdtrace: as it exits, %s", sc.pauseLine(p.pid))
	p.exitScan = sc
}
