//go:build linux

package session

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// ready attaches the probes to the process; the Process calls it before a
// launched command runs its first instruction.
func (s *session) ready(pid int) error {
	var (
		lib, runtime stacks.File
		err          error
	)
	if s.flags.PID != 0 {
		// The runtime, if mapped, is found with the maps (watchImage).
		lib, err = tracer.AllocatorOfRunning(pid)
	} else {
		lib, runtime, err = tracer.AllocatorAndRuntimeOfExec(pid)
	}
	if err != nil {
		return err
	}
	prog := tracer.ProgName(pid)
	p := &proc{pid: pid, prog: prog, late: s.flags.PID != 0}
	s.pmu.Lock()
	s.pid = pid
	s.procs[pid] = p
	s.pmu.Unlock()
	var in *tracer.Injected
	if s.flags.Inject {
		// The shim is loaded before the allocator is probed: what the
		// loader allocates for it is not the program's. And before the
		// unwind tables are parsed: the thread that calls dlopen stops
		// at each of its system calls until mdtrace lets it on, which
		// that parsing on every CPU made take 8 to 35 ms, not 2 to 5.
		in, err = s.injectLoad(p, lib)
	}
	// The unwind tables are made while the allocator is probed: both
	// wait for RCU grace periods, 10 to 20 ms each here, which the
	// process, held, waits for.
	unwound := make(chan struct{})
	go func() {
		defer close(unwound)
		s.loadUnwind(pid)
	}()
	if s.flags.PID != 0 {
		// A running process allocates as soon as the allocator is
		// probed: its backtraces need its tables by then, or they stop
		// at the first frame without a frame pointer.
		<-unwound
	}
	if err == nil {
		err = s.attach(p, lib)
	}
	if err == nil {
		s.probeRuntime(p, runtime)
		// The loader's notices watched, and the files mapped parsed
		// for names, while the tables are placed.
		s.watchLoader(p, nil)
	}
	<-unwound
	if s.aheadc != nil {
		// Parsed ahead after this, a table would stay for nothing.
		<-s.aheadc
		tracer.DropUnwindAhead()
	}
	if err != nil {
		return err
	}
	if in != nil {
		if err := s.inject(p, lib, in); err != nil {
			return err
		}
	}
	if s.flags.ReadyFile != "" {
		if err := writeReadyFile(s.flags.ReadyFile, pid); err != nil {
			return err
		}
	}
	if s.injected != nil {
		fmt.Fprintf(s.stderr, "mdtrace: tracing process %d (%s): %s\n", pid, prog, s.injectedLine())
	} else {
		fmt.Fprintf(s.stderr, "mdtrace: tracing process %d (%s): %s in %s\n", pid, prog, strings.Join(s.probes.Attached(pid), " "), lib)
	}
	if pts := s.probes.ProbePoints(pid); len(pts) > 0 && s.cfg.Has(options.Verbose) {
		// Where each probe went, and which ones trap twice: what a
		// traced call costs depends on it.
		var list []string
		for _, pt := range pts {
			list = append(list, pt.String())
		}
		fmt.Fprintf(s.stderr, "mdtrace: probe points: %s\n", strings.Join(list, ", "))
	}
	s.start = time.Now()
	s.logVerbose(p)
	return nil
}

// watchImage follows the libraries of the process's current program: its
// loader's changes from now on, and its maps as they are. A process held
// (at its exec, or before a forked child's first instruction) maps nothing
// meanwhile: its maps are read once, for its unwind tables, its loader and
// its names. One that runs has its loader watched before its maps are
// read, so that a library loaded between the two is in one or the other.
func (s *session) watchImage(p *proc, held bool) {
	if !held {
		s.watchLoader(p, nil)
		s.loadUnwind(p.pid)
		return
	}
	s.watchLoader(p, s.loadUnwind(p.pid))
}

// watchLoader is watchImage but for the unwind tables; maps are the
// process's maps, read already, or nil to read them.
func (s *session) watchLoader(p *proc, maps *stacks.Maps) {
	if loader, err := tracer.LoaderIn(p.pid, maps); err == nil && loader.Name != "" {
		if err := s.probes.WatchLibraries(p.pid, loader); err != nil {
			s.notice("%v; frames of libraries unloaded with dlclose may stay unnamed", err)
		}
	}
	s.rememberMapsFrom(p, maps)
}

// loadUnwind gives the stack walk of process pid the unwind tables of the
// files it maps now; it returns the maps they were made from, nil if none
// could be read.
func (s *session) loadUnwind(pid int) *stacks.Maps {
	return s.unwindFrom(pid, s.probes.LoadUnwindMaps)
}

// reloadUnwind is loadUnwind after the loader's notice (tracer.ReloadUnwind).
func (s *session) reloadUnwind(pid int) *stacks.Maps {
	return s.unwindFrom(pid, s.probes.ReloadUnwind)
}

func (s *session) unwindFrom(pid int, load func(int) (*stacks.Maps, error)) *stacks.Maps {
	maps, err := load(pid)
	// A process gone meanwhile has no more backtraces to take.
	if err != nil && !errors.Is(err, tracer.ErrProcessGone) {
		s.notice("%v: backtraces of process %d follow frame pointers only", err, pid)
	}
	return maps
}

// execed follows the process into a new program: the old image's blocks
// are gone, and the new program may use another allocator and loader.
func (s *session) execed(pid int) {
	p := s.traced(pid)
	if p == nil {
		return
	}
	if !s.unheld {
		// Stopped at its exec until this returns: its program,
		// environment and auxiliary vector are read once.
		defer tracer.Held(pid)()
	}
	s.probes.Execed(pid)
	p.hist.Reset()
	prog := tracer.ProgName(pid)
	if s.unheld {
		// Not held at its exec, the new program ran before mdtrace
		// learned of it.
		s.notice("process %d executed %s, and mdtrace, which does not hold it (--hold would), learned of it as it ran: until then, its backtraces may end early (its files' unwind tables were not loaded yet), and the calls to an allocator of its own were missed", pid, prog)
	}
	if s.rec != nil {
		s.rec.execStats(pid, prog)
	}
	s.pmu.Lock()
	p.prog = prog
	// A new image: its blocks are all seen, unless it ran before mdtrace
	// learned of it.
	p.late = s.unheld
	s.pmu.Unlock()
	lib, runtime, err := tracer.AllocatorAndRuntimeOfExec(pid)
	if err != nil {
		s.notice("process %d executed a program mdtrace cannot trace: %v", pid, err)
		return
	}
	if !slices.ContainsFunc(p.libs, func(f stacks.File) bool { return stacks.SameFile(f, lib) }) {
		if err := s.attach(p, lib); err != nil {
			s.notice("%v", err)
		}
	}
	s.probeRuntime(p, runtime)
	s.watchImage(p, !s.unheld)
}

// forked follows a child of a traced process, held before it runs: the
// same allocators are probed for it, and a zygote child (not a vfork)
// starts with a copy of its parent's table.
func (s *session) forked(parent, child int, vfork bool) {
	// A process that had the child's PID before it is forgotten first.
	s.reported(child)
	pp := s.traced(parent)
	if pp == nil {
		return
	}
	s.pmu.Lock()
	c := &proc{pid: child, prog: pp.prog, late: pp.late}
	s.procs[child] = c
	libs := slices.Clone(pp.libs)
	s.pmu.Unlock()
	if err := s.probes.Fork(parent, child, !vfork); err != nil {
		s.notice("%v", err)
	}
	if s.rec != nil {
		s.rec.forkStats(parent, child, vfork)
	}
	// The probes stay through an exec of a program on the same
	// allocator: a vfork child is probed now too.
	for _, lib := range libs {
		if err := s.attach(c, lib); err != nil {
			s.notice("process %d, forked from %d: %v", child, parent, err)
		}
	}
	// A vfork child runs in its parent's memory, with its parent's maps
	// and libraries, until it executes a program (watched then) or exits:
	// its walks go through its parent's list.
	if vfork {
		if err := s.probes.ShareUnwind(parent, child); err != nil {
			s.notice("%v: backtraces of process %d follow frame pointers only", err, child)
		}
	} else {
		s.watchImage(c, true)
	}
	fmt.Fprintf(s.stderr, "mdtrace: tracing process %d, forked from %d\n", child, parent)
}

// attach probes the allocator in lib for process p. In program mode the
// system's libc is probed for every process already.
func (s *session) attach(p *proc, lib stacks.File) error {
	// Before the probes: none of its calls may be sampled twice.
	if err := s.shimSampling(p, lib); err != nil {
		return err
	}
	var err error
	if s.systemLib.Name == "" || !stacks.SameFile(lib, s.systemLib) {
		err = s.probes.Attach(p.pid, lib)
	}
	if err := partialAttach(err, func(msg string) { s.notice("%s", msg) }); err != nil {
		return err
	}
	s.pmu.Lock()
	p.libs = append(p.libs, lib)
	s.pmu.Unlock()
	return nil
}

// shimSampling, for a process attached to with -p whose allocator is
// mdtrace's shim, preloaded by another mdtrace, reads whether that shim
// samples by itself (--sample-bytes there): the calls it reports at its
// sites are then a sample already. Without --sample-bytes the reports weigh
// them with the shim's interval; with the same interval the probes take
// each of them instead of sampling them again; with another one the
// estimates cannot be right, and the attach is refused.
func (s *session) shimSampling(p *proc, lib stacks.File) error {
	if s.flags.PID == 0 || s.flags.Inject || !tracer.HasShimSites(lib.Path) {
		return nil
	}
	n, err := tracer.ShimSampleBytes(p.pid, lib)
	if err != nil {
		return fmt.Errorf("process %d has mdtrace's shim (%s), whose sampling mdtrace cannot read, so the reports could not be weighed: %w", p.pid, lib.Name, err)
	}
	if n == 0 {
		return s.probes.ShimSamples(p.pid, false)
	}
	switch {
	case s.sampleBytes == 0:
		s.sampleBytes = n
		if p.pid == s.flags.PID {
			fmt.Fprintf(s.stderr, "mdtrace: the shim of process %d samples one allocation every %d bytes by itself (it was launched by mdtrace with --sample-bytes %d): block counts and byte totals in the reports are estimates, sizes are exact\n", p.pid, n, n)
		}
	case s.sampleBytes != n:
		return fmt.Errorf("the shim of process %d samples one allocation every %d bytes by itself (it was launched by mdtrace with --sample-bytes %d): sampling it again every %d bytes would make the estimates wrong; attach with --sample-bytes %d, or without --sample-bytes", p.pid, n, n, s.sampleBytes, n)
	case p.pid == s.flags.PID:
		fmt.Fprintf(s.stderr, "mdtrace: the shim of process %d samples one allocation every %d bytes by itself: the probes take each call it reports, without sampling them again\n", p.pid, n)
		// The probes' count of what they sampled would be that of
		// the shim's calls, all taken: not said at the end.
		s.probeSample = false
	}
	return s.probes.ShimSamples(p.pid, true)
}

// partialAttach returns the error of an attach, but for the functions that
// could not be probed, which it reports: tracing goes on without them.
func partialAttach(err error, report func(string)) error {
	var aerr *tracer.AttachError
	if !errors.As(err, &aerr) {
		return err
	}
	for _, f := range aerr.Failed {
		report(fmt.Sprintf("could not probe %s; its allocations are not tracked", f))
	}
	return nil
}

// exiting writes the exit reports while the process is held at its exit.
// A descendant's table goes with it; the first process's stays for the
// reports written when mdtrace ends.
func (s *session) exiting(pid int) {
	p := s.traced(pid)
	if p == nil {
		return
	}
	s.pmu.Lock()
	first := pid == s.pid
	s.pmu.Unlock()
	if first {
		// The first process's exit ends the run: its probes, which
		// can fire no more, are closed while its reports are written.
		s.probes.CloseLinks(pid)
		// Its reports come after those of the processes that ended
		// before it, whose reports waited for their end: none of
		// those needs this loop (exitLater).
		s.flushExits()
	}
	if s.unheld {
		// Gone already: its reports use the maps kept, and its PID,
		// which may be reused, opens nothing.
		s.pmu.Lock()
		p.gone = true
		s.pmu.Unlock()
	} else if s.exitLater(p) {
		return
	}
	s.finish(p)
	s.probes.Release(pid)
	if s.flags.Program != "" {
		s.dropProgramProc(pid)
	}
}

// adoptChild follows process pid, a child forked by a thread of a traced
// process that ptrace did not report, when forks are followed (launch
// mode, --follow-forks). The child waits in the shim's fork handler.
func (s *session) AdoptChild(pid int) bool {
	if s.flags.PID != 0 && !s.flags.FollowForks {
		return false
	}
	// Its parent, started early, is traced once it is probed.
	<-s.setupc
	ppid, err := tracer.ParentPID(pid)
	if err != nil || s.proc == nil || s.traced(ppid) == nil {
		return false
	}
	if err := s.proc.Adopt(ppid, pid); err != nil {
		s.notice("process %d, forked from %d by a thread ptrace does not follow: %v", pid, ppid, err)
		return false
	}
	return true
}

// refused reports a request on the control socket that was not answered.
func (s *session) Refused(pid int, reason string) {
	if pid == 0 {
		s.notice("refused requests on the shim's control socket: %s", reason)
		return
	}
	s.notice("refused a request on the shim's control socket from process %d: %s", pid, reason)
}
