//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/stacks"
)

// AttachError reports entry points that could not be probed. Tracing goes
// on without them; the caller reports them to the user.
type AttachError struct {
	Failed []string // "symbol: reason"
}

func (e *AttachError) Error() string {
	return fmt.Sprintf("could not probe %d allocator functions: %s", len(e.Failed), strings.Join(e.Failed, "; "))
}

// probeSite is one address to probe.
type probeSite struct {
	entryPoint
	offset uint64
}

// Attach puts the probes on the allocator in the ELF file for process
// pid only: other processes that map the same file pay nothing. A file
// already probed for pid, by whatever path, is left as it is. It fails
// when malloc, free, calloc or realloc cannot be probed; an *AttachError
// lists optional functions that could not be. When the file is mdtrace's shim,
// its two probe sites are probed instead of the allocator's functions. When
// the file is a C++ runtime that defines operator new but not malloc, only its
// news are probed, for backtraces (see runtimeNews), and only when
// backtraces are taken; the process's Attached list stays the allocator's.
//
// Where the kernel has uprobe_multi links (6.6), all entry probes form one
// link and all return probes another, so that attaching and detaching
// cost two kernel grace periods instead of one per probe. A function's
// probe goes past its prologue where the kernel then emulates the probed
// instruction instead of single-stepping it (probePoint).
func (p *Probes) Attach(pid int, file stacks.File) error {
	return p.attach(pid, file, !p.noBatch)
}

// AttachBatches is Attach with the shim's batch site probed even when the
// probes were loaded without batches (NoBatch): for a shim mdtrace loaded
// into process pid that batches its samples (--all --inject).
func (p *Probes) AttachBatches(pid int, file stacks.File) error {
	return p.attach(pid, file, true)
}

func (p *Probes) attach(pid int, file stacks.File, batches bool) error {
	p.reclaim(pid)
	// The file is opened at its Path, and named by its Name.
	lib, name := file.Path, file.Name
	id, identified := statID(lib)
	p.mu.Lock()
	again := identified && p.probed[pid][id]
	p.mu.Unlock()
	if again {
		return nil
	}
	offsets, err := funcOffsets(lib)
	if err != nil {
		if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); pid > 0 && serr != nil {
			return fmt.Errorf("probing %s: %w", name, ErrProcessGone)
		}
		if lib != name {
			return fmt.Errorf("%s: %w", name, err)
		}
		return err
	}
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return fmt.Errorf("opening %s: %w", name, err)
	}
	var (
		sites  []probeSite
		points []ProbePoint
		names  []string
		done   = map[uint64]bool{}
		eps    = entryPoints
		prog   = p.objs.AllocEntry
	)
	_, hasMalloc := offsets["malloc"]
	_, hasNew := offsets["_Znwm"]
	switch {
	case hasShimSites(offsets):
		eps, prog = shimSites, p.objs.AllocSite
		// Without the probe that drains a thread's batch at its end,
		// the batch site stays unprobed: the shim then reports each
		// call at the other sites.
		if !batches || !p.batchReady() {
			eps = shimSites[:2]
		}
	case !hasMalloc && hasNew:
		// A C++ runtime on another allocator: its operator new, for
		// backtraces only.
		if p.stackDepth == 0 {
			return nil
		}
		eps = runtimeNews
	}
	for _, ep := range eps {
		// malloc_usable_size changes nothing; only verify_pointers
		// checks its pointer. Some programs call it for every block:
		// without verify_pointers, it costs them no probe.
		// A thread's end matters to verify_pointers and record_allocs:
		// glibc's frees then are neither errors nor the program's calls.
		if ep.call == abi.CallUsableSize && !p.verify || ep.call == abi.CallThreadEnd && !p.verify && !p.record {
			continue
		}
		fs, ok := offsets[ep.symbol]
		if !ok {
			if ep.required {
				return fmt.Errorf("%s has no %s function", name, ep.symbol)
			}
			continue
		}
		if !slices.Contains(names, ep.name()) && ep.call != abi.CallThreadEnd {
			names = append(names, ep.name())
		}
		// Functions exported at one address are probed once.
		if done[fs.off] {
			continue
		}
		done[fs.off] = true
		off := fs.off
		var pl placement
		if prog == p.objs.AllocEntry {
			pl = entryPlacement(lib, fs, ep.use(p.verify))
			off = pl.off
		}
		switch {
		// A runtime's new that only jumps to another new (new[] to
		// new) adds nothing: the other's probe sees the same caller.
		case ep.call == abi.CallRuntimeNew && pl.thunk:
			continue
		// Nor does an allocator's operator that only jumps to another
		// function probed here (jemalloc's delete[] to free): the call
		// is counted there, once.
		case strings.HasPrefix(ep.symbol, "_Z") && pl.thunk && probedHere(pl.target, offsets):
			continue
		// Nor a runtime's new whose probe would be single-stepped: its
		// block keeps the runtime's frame rather than cost every call
		// 9 us.
		case ep.call == abi.CallRuntimeNew && pl.stepped:
			continue
		}
		// Past a "sub $n,%rsp" (libstdc++'s nothrow forms), a runtime's
		// new finds the entry's stack pointer n bytes up: n goes in the
		// cookie's high half.
		if ep.call == abi.CallRuntimeNew {
			ep.call |= pl.delta << 32
		}
		if prog == p.objs.AllocEntry && ep.call == abi.CallFree {
			// With record_allocs (its end time) and verify_pointers
			// (its place in nested calls), free gets a return probe.
			ep.ret = p.record || p.verify
		}
		// The allocator's probes know the extent of its code, to tell
		// its own calls (a free at a thread's end, a malloc inside
		// realloc) from the program's.
		call := ep.call & abi.CallMask
		if prog == p.objs.AllocEntry && call != abi.CallRuntimeNew {
			ep.call |= callerPages(pl) << 32
		}
		// glibc's chunk header gives a block's usable size, over which
		// record_allocs' PRESENT_BYTES is read before a free or realloc.
		if prog == p.objs.AllocEntry && stacks.IsLibc(lib) &&
			(call == abi.CallFree || call == abi.CallRealloc || call == abi.CallReallocarray) {
			ep.call |= abi.CallGlibcChunks
		}
		// For uprobe sessions (session.go): which calls have a return
		// probe, and which of glibc's call no other probed function.
		if prog == p.objs.AllocEntry && ep.ret {
			ep.call |= abi.CallReturn
		}
		if prog == p.objs.AllocEntry && stacks.IsLibc(name) && (call == abi.CallMalloc || call == abi.CallCalloc) {
			ep.call |= abi.CallNoNesting
		}
		sites = append(sites, probeSite{ep, off})
		if prog == p.objs.AllocEntry {
			points = append(points, ProbePoint{ep.symbol, off - fs.off, pl.inst, pl.stepped})
		}
	}
	// Before a delete can be hit, free must know to look for one in flight.
	if slices.ContainsFunc(sites, func(s probeSite) bool { return s.call&abi.CallMask == abi.CallDelete }) {
		if err := p.objs.HaveDeletes.Set(uint32(1)); err != nil {
			return fmt.Errorf("setting have_deletes: %w", err)
		}
	}
	var (
		links  []link.Link
		failed []string
	)
	if p.multi {
		links, err = p.attachMulti(ex, lib, pid, prog, sites)
	} else {
		links, failed, err = p.attachEach(ex, pid, prog, sites)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
			return fmt.Errorf("probing %s: %w", name, ErrProcessGone)
		}
		return fmt.Errorf("probing %s: %w", name, err)
	}
	if err := p.traceProcess(pid); err != nil {
		closeLinks(links)
		return err
	}
	// Not for --all and program mode (pid 0), which check no process's
	// reachability: the program would run at the end of every system
	// call on the host.
	if hasMalloc && pid != 0 && !stacks.IsLibc(lib) && prog != p.objs.AllocSite {
		p.followMappings()
	}
	p.mu.Lock()
	p.links[pid] = append(p.links[pid], links...)
	if identified {
		if p.probed[pid] == nil {
			p.probed[pid] = map[fileID]bool{}
		}
		p.probed[pid][id] = true
		if p.fileLinks[pid] == nil {
			p.fileLinks[pid] = map[fileID][]link.Link{}
		}
		p.fileLinks[pid][id] = append(p.fileLinks[pid][id], links...)
		if pid == 0 {
			for _, s := range sites {
				p.probeOffsets[id] = append(p.probeOffsets[id], s.offset)
			}
		}
	}
	if hasMalloc {
		p.attached[pid] = names
		p.points[pid] = points
	}
	p.mu.Unlock()
	if len(failed) > 0 {
		return &AttachError{Failed: failed}
	}
	return nil
}

// BatchDepth reports whether the probes take the shim's batches (not with
// NoBatch, nor with record_allocs, whose records go one call at a time
// with its times), and the frames each batched allocation carries.
func (p *Probes) BatchDepth() (int, bool) {
	return p.stackDepth, p.objs.BatchDrain != nil && !p.noBatch
}

// BatchDepth is Probes.BatchDepth for the probes cfg will load, known
// before they are.
func (cfg ProbeConfig) BatchDepth() (int, bool) {
	return cfg.StackDepth, !cfg.NoBatch && !cfg.Record
}

// batchReady attaches, the first time, the probe at the end of every
// thread that hands what a thread's batch still holds to the table
// (batch_drain); it reports whether it is attached.
func (p *Probes) batchReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drainLink != nil {
		return true
	}
	if p.objs.BatchDrain == nil {
		return false
	}
	// At the entry of do_exit the thread's memory is there on every
	// kernel; the exit tracepoint comes after the kernel let go of it on
	// older ones (6.1), and serves where kprobes cannot be used.
	l, err := link.Kprobe("do_exit", p.objs.BatchDrainKprobe, nil)
	p.drainKprobe = err == nil
	if err != nil {
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exit", Program: p.objs.BatchDrain})
	}
	if err != nil {
		return false
	}
	p.drainLink = l
	return true
}

// traceProcess enters pid in the traced processes, for the exec
// tracepoint (which tells its programs' blocks apart) and, with record, the
// thread exit one; it attaches those tracepoints the first time.
func (p *Probes) traceProcess(pid int) error {
	if err := p.objs.Traced.Put(uint32(pid), uint32(1)); err != nil {
		return fmt.Errorf("tracing process %d: %w", pid, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	// Raw tracepoints need no tracefs.
	if p.execLink == nil {
		p.execLink, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: p.objs.ExecGen})
		if err != nil {
			return fmt.Errorf("attaching the exec tracepoint: %w", err)
		}
	}
	if p.record && p.exitLink == nil {
		p.exitLink, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exit", Program: p.objs.ThreadExit})
		if err != nil {
			return fmt.Errorf("attaching the thread exit tracepoint: %w", err)
		}
	}
	return nil
}

// attachMulti attaches every site of the file at path with two
// uprobe_multi links, or, for the allocator's functions on a kernel with
// uprobe sessions, one session link.
func (p *Probes) attachMulti(ex *link.Executable, path string, pid int, prog *ebpf.Program, sites []probeSite) ([]link.Link, error) {
	var entry, ret link.UprobeMultiOptions
	entry.PID, ret.PID = uint32(pid), uint32(pid)
	for _, s := range sites {
		entry.Addresses = append(entry.Addresses, s.offset)
		entry.Cookies = append(entry.Cookies, s.call)
		if s.ret {
			ret.Addresses = append(ret.Addresses, s.offset)
		}
	}
	if prog == p.objs.AllocEntry && len(ret.Addresses) > 0 && p.sessions() {
		l, err := uprobeSessionLink(path, p.objs.AllocSession, entry.Addresses, entry.Cookies, entry.PID)
		if err == nil {
			return []link.Link{l}, nil
		}
		if !sessionRefused(err) {
			return nil, err
		}
		// A kernel before 6.13: entry and return probes apart.
		p.noSessions.Store(true)
	}
	// The return probes go in first: a return whose entry was not seen
	// does nothing, but an entry probe before them would see allocations
	// whose blocks never come, then their frees as of blocks from before
	// the attach (thousands, in a loop of pairs).
	var rl link.Link
	if len(ret.Addresses) > 0 {
		var err error
		if rl, err = ex.UretprobeMulti(nil, p.objs.AllocReturn, &ret); err != nil {
			return nil, err
		}
	}
	el, err := ex.UprobeMulti(nil, prog, &entry)
	if err != nil {
		if rl != nil {
			rl.Close()
		}
		return nil, err
	}
	if rl == nil {
		return []link.Link{el}, nil
	}
	p.markReturn(rl)
	return []link.Link{rl, el}, nil
}

// forgetReturnsLocked forgets links about to be closed; p.mu held.
func (p *Probes) forgetReturnsLocked(links []link.Link) {
	for _, l := range links {
		delete(p.returnLinks, l)
	}
}

// markReturn notes that l is a return probes' link: Detach closes those
// last.
func (p *Probes) markReturn(l link.Link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.returnLinks == nil {
		p.returnLinks = map[link.Link]bool{}
	}
	p.returnLinks[l] = true
}

// attachEach attaches every site with its own perf-event uprobes, for
// kernels without uprobe_multi. Optional functions that fail are listed.
func (p *Probes) attachEach(ex *link.Executable, pid int, prog *ebpf.Program, sites []probeSite) ([]link.Link, []string, error) {
	var (
		links  []link.Link
		failed []string
	)
	for _, s := range sites {
		opts := &link.UprobeOptions{Address: s.offset, PID: pid, Cookie: s.call}
		// The return probe first, as attachMulti does.
		var rl link.Link
		var err error
		if s.ret {
			rl, err = ex.Uretprobe(s.symbol, p.objs.AllocReturn, opts)
		}
		var l link.Link
		if err == nil {
			l, err = ex.Uprobe(s.symbol, prog, opts)
			if err != nil && rl != nil {
				rl.Close()
			}
		}
		if err == nil && rl != nil {
			links = append(links, rl)
			p.markReturn(rl)
		}
		if err != nil {
			if s.required || errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
				closeLinks(links)
				return nil, nil, fmt.Errorf("%s: %w", s.symbol, err)
			}
			failed = append(failed, s.symbol+": "+err.Error())
			continue
		}
		links = append(links, l)
	}
	return links, failed, nil
}

// ProbePoint is where the entry probe of an allocator function went: its
// offset from the function's entry, the instruction there, and whether the
// kernel single-steps it (a second trap each call).
type ProbePoint struct {
	Symbol  string
	Offset  uint64
	Inst    string
	Stepped bool
}

func (pt ProbePoint) String() string {
	s := fmt.Sprintf("%s+%d (%s)", pt.Symbol, pt.Offset, pt.Inst)
	if pt.Stepped {
		s += " single-stepped"
	}
	return s
}

// ProbePoints returns where the allocator functions of pid are probed (not
// the shim's sites, which the kernel calls into without a trap).
func (p *Probes) ProbePoints(pid int) []ProbePoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.points[pid])
}

// Attached returns the allocator functions probed for pid.
func (p *Probes) Attached(pid int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.attached[pid]...)
}

// Detach removes the uprobes; the maps stay readable until Close.
func (p *Probes) Detach() {
	p.mu.Lock()
	links := p.programLinks
	for _, l := range p.links {
		links = append(links, l...)
	}
	p.programLinks = nil
	for _, l := range []*link.Link{&p.exitLink, &p.execLink, &p.drainLink, &p.watchLink} {
		if *l != nil {
			links = append(links, *l)
			*l = nil
		}
	}
	clear(p.links)
	links = append(links, p.retired.links...)
	p.retired.links = nil
	// The entry probes go first: an entry seen without its return would
	// count as a call whose return was missed.
	var returns []link.Link
	links = slices.DeleteFunc(links, func(l link.Link) bool {
		if p.returnLinks[l] {
			returns = append(returns, l)
			return true
		}
		return false
	})
	clear(p.returnLinks)
	p.mu.Unlock()
	p.stopCleaner()
	closeLinks(links)
	closeLinks(returns)
	p.closing.Wait()
}

// closeLinks closes links all at once. Closing a uprobe link waits for a
// kernel grace period (20 to 40 ms here): closed one after the other, the
// links of one process took as long as the rest of a short run.
func closeLinks(links []link.Link) {
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Go(func() { l.Close() })
	}
	wg.Wait()
}

// DetachFile takes the probes Attach put on file for process pid away
// (--inject, once the shim's hooks take the calls). It reports whether
// there were any.
func (p *Probes) DetachFile(pid int, file stacks.File) bool {
	links := p.unlinkFile(pid, file)
	closeLinks(links)
	return len(links) > 0
}

// DetachFileLater is DetachFile for a process that has ended (--all
// --inject): the probes are taken off its books at once, and their links
// closed in the background, which takes tens of ms (a uprobe's removal
// waits for the kernel's grace periods). Detach waits for them.
func (p *Probes) DetachFileLater(pid int, file stacks.File) {
	p.closeLater(p.unlinkFile(pid, file))
}

// closeLater closes links in the background; Detach waits for them.
func (p *Probes) closeLater(links []link.Link) {
	if len(links) == 0 {
		return
	}
	p.closing.Add(1)
	go func() {
		defer p.closing.Done()
		closeLinks(links)
	}()
}

// unlinkFile takes the links Attach made on file for process pid off the
// books, and returns them.
func (p *Probes) unlinkFile(pid int, file stacks.File) []link.Link {
	id, ok := statID(file.Path)
	if !ok {
		return nil
	}
	p.mu.Lock()
	links := p.fileLinks[pid][id]
	delete(p.fileLinks[pid], id)
	p.forgetReturnsLocked(links)
	delete(p.probed[pid], id)
	if len(links) > 0 {
		kept := p.links[pid][:0]
		for _, l := range p.links[pid] {
			if !slices.Contains(links, l) {
				kept = append(kept, l)
			}
		}
		p.links[pid] = kept
	}
	p.mu.Unlock()
	return links
}
