//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// watchLibraries remembers every library the loader reports, with its
// load address, until stop is called.
//
// A notice lists all of a process's libraries, one event each, whenever
// one is loaded or unloaded: the unwind tables of the processes that sent
// some are brought up to date once the notices read so far run out, not
// once a library (each reads the process's maps).
func (s *session) watchLibraries(n *tracer.NoticeReader) (sync, stop func()) {
	changed := map[int]bool{}
	next := func(deadline time.Time) (tracer.Library, error) {
		if len(changed) > 0 {
			lib, err := n.Next(time.Now())
			if !errors.Is(err, tracer.ErrNoRecord) {
				return lib, err
			}
			for pid := range changed {
				maps := s.reloadUnwind(pid)
				if p := s.traced(pid); p != nil && s.unheld {
					// Kept for the reports once the process is
					// gone, its maps with it: those the list was
					// made from (a library mapped since has its
					// own notice).
					s.rememberMapsFrom(p, maps)
				}
			}
			clear(changed)
		}
		return n.Next(deadline)
	}
	handle := func(lib tracer.Library) {
		if s.rememberLibrary(lib) {
			changed[lib.PID] = true
		}
	}
	sync, stopPump := pump(next, handle, n.Wake)
	return sync, func() {
		n.Close()
		stopPump()
	}
}

// rememberLibrary adds a library the loader reported to the history, and
// returns whether it was a traced process's. A relative path is the
// process's (dlopen of "lib/x.so"); a name without a slash is the vdso,
// which has no file.
func (s *session) rememberLibrary(lib tracer.Library) bool {
	path := lib.Path
	if !strings.Contains(path, "/") {
		return false
	}
	if !filepath.IsAbs(path) {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", lib.PID))
		if err != nil {
			return false
		}
		path = filepath.Join(cwd, path)
	}
	p := s.traced(lib.PID)
	if p == nil {
		return false
	}
	if !p.hist.HasLibrary(path, lib.Base) {
		// The loader names it in the process's root. Once the process
		// is gone that root is too: the file is then read at its path.
		open := ""
		if f, err := stacks.ResolveFile(lib.PID, path); err == nil {
			open = f.Path
		}
		p.hist.AddLibrary(path, lib.Base, open)
	}
	if s.shim != "" && filepath.Base(path) == filepath.Base(s.shim) {
		s.shimLoaded(p)
	}
	if tracer.MaybeCxxRuntime(path) {
		if f, err := stacks.ResolveFile(lib.PID, path); err == nil {
			s.probeRuntime(p, f)
		}
	}
	return true
}

// probeRuntime probes the operator new of a C++ runtime library the process
// has loaded, once, so that a block from new has new's caller in its
// backtrace (see tracer.Attach). Not where the allocator has an operator
// new of its own, which takes the runtime's place: the shim's, jemalloc's,
// tcmalloc's (preloaded, or linked before the runtime as usual).
func (s *session) probeRuntime(p *proc, file stacks.File) {
	if file.Name == "" || !tracer.IsCxxRuntime(file) {
		return
	}
	s.pmu.Lock()
	libs := slices.Clone(p.libs)
	s.pmu.Unlock()
	if len(libs) == 0 || slices.ContainsFunc(libs, func(f stacks.File) bool { return stacks.SameFile(f, file) }) || tracer.DefinesNew(libs[0].Path) {
		return
	}
	// A process that is gone has no more blocks to name.
	if err := s.attach(p, file); err != nil && !errors.Is(err, tracer.ErrProcessGone) {
		s.notice("process %d: %v; blocks from new keep the runtime's frame instead of new's caller", p.pid, err)
	}
}

// keepMapsEvery is how often the maps of a process not held are read
// again, besides at each change of its libraries.
const keepMapsEvery = time.Second

// keepMaps reads the maps of the traced processes every keepMapsEvery
// until stop is called, for the reports written once a process not held
// is gone (a heap dump lists its maps): a mapping made, or a heap grown,
// since its last change of libraries is in them, unless it came in its
// last second.
func (s *session) keepMaps() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(keepMapsEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, p := range s.live() {
					s.rememberMaps(p)
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// rememberMaps adds the process's current maps to the history and parses
// the files of new mappings while they are mapped.
func (s *session) rememberMaps(p *proc) {
	s.rememberMapsFrom(p, nil)
}

// rememberMapsFrom is rememberMaps given the process's maps, read already;
// nil has them read.
func (s *session) rememberMapsFrom(p *proc, maps *stacks.Maps) {
	s.pmu.Lock()
	gone := p.gone
	s.pmu.Unlock()
	if gone {
		// Its PID may be another process's now.
		return
	}
	if maps == nil {
		var err error
		if maps, err = stacks.ReadMaps(p.pid); err != nil {
			return
		}
	}
	s.pmu.Lock()
	last := p.lastMaps
	s.pmu.Unlock()
	if s.unheld && last != nil && tracer.Exiting(p.pid) {
		// A process not held may have been read as it let its memory
		// go, or once its main thread ended (which shows none): the
		// maps read before stand for those it ended with.
		return
	}
	s.pmu.Lock()
	p.lastMaps = maps
	s.pmu.Unlock()
	for _, m := range p.hist.Add(maps) {
		s.sym.Symbolize(p.pid, maps, []uint64{m.Start})
		if tracer.MaybeCxxRuntime(m.Path) {
			s.probeRuntime(p, stacks.MappedFile(p.pid, &m))
		}
	}
}

// shimLoaded gives the shim a process has just loaded (a program it
// executed, whose shim starts from the options' state) the state of
// backtraces that signal 45 left, when it toggled them since the start.
// What the program allocates before the loader's notice is read keeps the
// options' state.
func (s *session) shimLoaded(p *proc) {
	if !s.cfg.BacktraceEnableOnSignal {
		return
	}
	on := s.btOn.Load()
	if on == (s.cfg.BacktraceEnabled || !s.cfg.BacktraceEnableOnSignal) {
		return
	}
	if err := tracer.SetShimBacktrace(p.pid, s.shim, on); err != nil {
		s.notice("toggling backtraces: %v", err)
	}
}

// maxDeferredWalks bounds the deferred walks waiting for their process's
// list of mappings (about 16 KB each, the stack's copy): past it the
// oldest is finished with the list as it is.
const maxDeferredWalks = 256

// watchDeferred finishes the walks the probes left to mdtrace (see
// tracer.DeferredWalk) until stop is called: each waits, a little at the
// most, until the loader's notice that made its process's list lack a
// library is read and the list rewritten, then goes on with the library's
// table. sync returns once every walk sent so far is finished, the
// library notices read first. quiet reports whether no walk of process
// pid waits, and none is sent and not read.
func (s *session) watchDeferred(r *tracer.DeferReader) (syncAll func(), quiet func(pid int) bool, stop func()) {
	var (
		mu      sync.Mutex
		pending []*tracer.DeferredWalk
	)
	retry := func(final bool) {
		mu.Lock()
		defer mu.Unlock()
		kept := pending[:0]
		for _, w := range pending {
			if !s.probes.FinishWalk(w, final) {
				kept = append(kept, w)
			}
		}
		clear(pending[len(kept):])
		pending = kept
	}
	next := func(deadline time.Time) (*tracer.DeferredWalk, error) {
		retry(false)
		mu.Lock()
		waiting := len(pending) > 0
		mu.Unlock()
		if waiting {
			// The library's table is tens of milliseconds away.
			if soon := time.Now().Add(20 * time.Millisecond); soon.Before(deadline) {
				deadline = soon
			}
		}
		return r.Next(deadline)
	}
	// waitsFor is whether a walk of process pid waits already.
	waitsFor := func(pid int) bool {
		return slices.ContainsFunc(pending, func(w *tracer.DeferredWalk) bool { return w.PID == pid })
	}
	handle := func(w *tracer.DeferredWalk) {
		if s.probes.FinishWalk(w, false) {
			return
		}
		mu.Lock()
		first := !waitsFor(w.PID)
		if len(pending) >= maxDeferredWalks {
			s.probes.FinishWalk(pending[0], true)
			pending = slices.Delete(pending, 0, 1)
		}
		pending = append(pending, w)
		mu.Unlock()
		if first {
			// The process's list is read now, while it runs, rather
			// than once its loader's notices are: a process that
			// exits a moment after its dlopen takes its files with it.
			s.loadUnwind(w.PID)
		}
	}
	syncPump, stopPump := pump(next, handle, r.Wake)
	syncAll = func() {
		// Both readers at once: each sync is a round trip to its
		// goroutine, which a process held at its exit waits for.
		libs := make(chan struct{})
		go func() {
			defer close(libs)
			s.syncLibraries()
		}()
		syncPump()
		<-libs
		// The lists of the processes whose walks still wait, while
		// they are there to read (held at their exit, or running).
		mu.Lock()
		var pids []int
		for _, w := range pending {
			if !slices.Contains(pids, w.PID) {
				pids = append(pids, w.PID)
			}
		}
		mu.Unlock()
		for _, pid := range pids {
			if p := s.traced(pid); p != nil {
				s.pmu.Lock()
				gone := p.gone
				s.pmu.Unlock()
				if !gone {
					s.loadUnwind(pid)
				}
			}
		}
		retry(true)
	}
	// Once stopped, the reader is closed and has no buffer to look at.
	stopped := false
	quiet = func(pid int) bool {
		mu.Lock()
		defer mu.Unlock()
		return !stopped && !r.Queued() && !waitsFor(pid)
	}
	return syncAll, quiet, func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		r.Close()
		stopPump()
	}
}
