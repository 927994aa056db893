//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/ctl"
	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// session is one run of mdtrace on one process.
type session struct {
	flags  *Flags
	cfg    *options.Config
	stderr io.Writer
	log    *output.Log
	// logToStderr is set when the log is standard error, so that summaries
	// are not printed twice.
	logToStderr bool

	probes *tracer.Probes
	sym    *stacks.Symbolizer
	// syncLibraries and syncErrors return once every library notice and
	// pointer error sent so far is handled.
	syncLibraries, syncErrors func()
	// unknownSuppressed counts unknown pointers not reported.
	unknownSuppressed int
	rec               *recorder // record_allocs
	proc              *tracer.Process

	// mu serializes the reports and guards the procs' finished flags
	// and btOn; pmu, taken after mu if both are, guards procs and each
	// proc's prog and libs. The library watcher takes only pmu, so a
	// report can wait for it while holding mu.
	mu    sync.Mutex
	pmu   sync.Mutex
	ctl   *ctl.Server   // the shim's control socket, in launch mode with the shim
	pid   int           // the process launched or attached to
	procs map[int]*proc // it and, with forks followed, its descendants
	// systemLib is, in program mode, the system's libc, whose probes have
	// no PID filter.
	systemLib string
	// programPaths are, in program mode, the paths that the processes
	// matched executed (their parent's, for forks), under pmu.
	programPaths map[int]string
	btOn         bool
	start        time.Time // when tracing began
}

// proc is one traced process.
type proc struct {
	pid      int
	prog     string
	libs     []string           // the allocator files probed
	hist     stacks.MapsHistory // every library the process has mapped
	finished bool               // the exit reports are written
}

// traced returns the traced process pid, nil if it is not one.
func (s *session) traced(pid int) *proc {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.procs[pid]
}

// live returns the traced processes whose exit reports are not written.
func (s *session) live() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pmu.Lock()
	defer s.pmu.Unlock()
	var out []*proc
	for _, p := range s.procs {
		if !p.finished {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *proc) int { return a.pid - b.pid })
	return out
}

// launchGrace is how long mdtrace waits, after SIGINT or SIGTERM, for a
// launched command to exit by itself (a terminal's Ctrl-C reaches both).
const launchGrace = time.Second

// run traces the process the flags name and returns the exit status.
func run(flags *Flags, cfg *options.Config, stderr io.Writer) (int, error) {
	if err := checkPrivileges(); err != nil {
		return 1, err
	}
	s := &session{flags: flags, cfg: cfg, stderr: stderr, sym: stacks.NewSymbolizer(), procs: map[int]*proc{}}
	s.sym.DebugDirs = flags.DebugDirs
	logw := stderr
	var logFile *os.File
	if flags.Log != "" {
		f, err := output.CreateFile(flags.Log, 0o644)
		if err != nil {
			return 1, fmt.Errorf("opening the log: %w", err)
		}
		defer f.Close()
		logw, logFile = f, f
	} else {
		s.logToStderr = true
	}
	s.log = output.NewLog(logw)

	verify := slices.Contains(cfg.Set, "verify_pointers")
	depth := 0
	switch {
	case cfg.Has(options.Backtrace):
		depth = cfg.BacktraceFrames
	case verify:
		// Failure and free backtraces.
		depth = options.DefaultBacktraceFrames
	}
	s.btOn = cfg.BacktraceEnabled || !cfg.BacktraceEnableOnSignal
	probes, err := tracer.LoadProbes(tracer.ProbeConfig{
		StackDepth:        depth,
		BacktraceMinSize:  cfg.BacktraceMinSizeBytes,
		BacktraceMaxSize:  cfg.BacktraceMaxSizeBytes,
		BacktraceOff:      !s.btOn,
		MaxAllocs:         flags.MaxAllocs,
		Record:            cfg.Has(options.RecordAllocs),
		NoAllocBacktraces: !cfg.Has(options.Backtrace),
		Verify:            verify,
		// A launched command's every block is seen: unknown pointers
		// are errors. An attached process has blocks from before.
		UnknownIsError: flags.PID == 0 && flags.Program == "",
		// Probes on the allocator send SIGABRT to the thread; the
		// process is held at its exit until the error block is
		// written. A preloaded shim aborts by itself.
		AbortOnError: cfg.Has(options.AbortOnError),
		Program:      flags.Program,
		// Batches need every block seen from the start, as a launched
		// command's are: in an attached process the frees of older
		// blocks would each be kept for an allocation that never comes.
		NoBatch: flags.PID != 0 || flags.Program != "" || flags.All || flags.NoBatch || flags.SampleBytes > 0,
	})
	var verr *tracer.VerifierError
	if errors.As(err, &verr) && cfg.Has(options.Verbose) {
		fmt.Fprintln(stderr, verr.Log())
	}
	if err != nil {
		return 1, err
	}
	defer probes.Close()
	s.probes = probes
	if cfg.Has(options.RecordAllocs) {
		if s.rec, err = newRecorder(s, cfg.RecordAllocsNumEntries); err != nil {
			return 1, err
		}
		defer s.rec.Close()
	}

	notices, err := probes.LibraryNotices()
	if err != nil {
		return 1, err
	}
	var stopWatch func()
	s.syncLibraries, stopWatch = s.watchLibraries(notices)
	defer stopWatch()
	s.syncErrors = func() {}
	if verify {
		sync, stop, err := s.watchPointerErrors()
		if err != nil {
			return 1, err
		}
		s.syncErrors = sync
		defer stop()
	}

	// Signals are caught from here on: none may kill mdtrace while a
	// launched command is held stopped.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP,
		syscall.Signal(options.BacktraceEnableSignal), syscall.Signal(options.RecordAllocsSignal),
		syscall.Signal(options.BacktraceDumpSignal), syscall.Signal(options.CheckUnreachableSignal),
		syscall.Signal(options.LogAllocatorStatsSignal))
	defer signal.Stop(sigs)

	if flags.Program != "" {
		return s.runProgram(sigs)
	}
	hooks := tracer.Hooks{Ready: s.ready, Exit: s.exiting, Exec: s.execed}
	if flags.PID == 0 || flags.FollowForks {
		hooks.Fork = s.forked
	}
	if flags.PID != 0 {
		s.proc, err = tracer.Attach(flags.PID, hooks)
	} else {
		var (
			env   []string
			extra []*os.File
		)
		if env, extra, err = s.launchEnv(logFile); err != nil {
			return 1, err
		}
		if s.ctl != nil {
			defer s.ctl.Close()
		}
		s.proc, err = tracer.Launch(flags.Command, env, extra, hooks)
	}
	if err != nil {
		return 1, err
	}

	interrupted := syscall.Signal(0)
	var tick <-chan time.Time
	if flags.Interval > 0 {
		t := time.NewTicker(flags.Interval)
		defer t.Stop()
		tick = t.C
	}
loop:
	for {
		select {
		case <-tick:
			s.periodic()
		case <-s.proc.Done():
			break loop
		case sig := <-sigs:
			if s.handleSignal(sig.(syscall.Signal)) {
				interrupted = sig.(syscall.Signal)
				break loop
			}
		}
	}
	if interrupted != 0 {
		if flags.PID == 0 {
			select {
			case <-s.proc.Done():
				interrupted = 0
			case <-time.After(launchGrace):
			}
		}
		if interrupted != 0 {
			s.finishAll()
			if err := s.proc.Detach(); err != nil {
				fmt.Fprintf(stderr, "mdtrace: %v\n", err)
			}
		}
	}
	st, _ := s.proc.Wait()
	s.finishAll()
	probes.Detach()
	s.reportLosses()
	if flags.PID != 0 {
		// Interrupting is how tracing an attached process normally ends.
		return 0, nil
	}
	if interrupted != 0 {
		return 128 + int(interrupted), nil
	}
	if st.Known {
		return st.Code, nil
	}
	return 0, nil
}

// launchEnv is the environment of a launched command, nil for mdtrace's
// own, and the files it inherits from descriptor 3 on. The shim is
// preloaded when the options need it and, unless --no-preload, for its
// probe sites, which cost the traced program a fraction of probes on the
// allocator itself.
func (s *session) launchEnv(logFile *os.File) ([]string, []*os.File, error) {
	need := needsShim(s.cfg) || s.flags.SampleBytes > 0
	if !need && s.flags.NoPreload {
		return nil, nil, nil
	}
	shim, err := shimPath(s.flags)
	if err != nil {
		if need {
			return nil, nil, err
		}
		fmt.Fprintf(s.stderr, "mdtrace: note: %v; probing the program's allocator instead\n", err)
		return nil, nil, nil
	}
	if s.flags.SampleBytes > 0 {
		if ok, note := preloadable(s.flags.Command[0]); !ok && note != "" {
			return nil, nil, fmt.Errorf("%s; --sample-bytes samples in the shim", note)
		}
	}
	if !need {
		ok, note := preloadable(s.flags.Command[0])
		if note != "" {
			fmt.Fprintf(s.stderr, "mdtrace: note: %s\n", note)
		}
		if !ok {
			return nil, nil, nil
		}
	}
	env := tracer.PreloadEnv(os.Environ(), shim, optionsEnv+"="+s.flags.Options)
	// The shim's signal handlers and get_malloc_leak_info reach mdtrace
	// through its control socket.
	srv, err := ctl.Listen(func(pid int) bool { return s.traced(pid) != nil }, s)
	if err != nil {
		return nil, nil, err
	}
	s.ctl = srv
	env = append(env, srv.Env())
	if s.cfg.Has(options.RecordAllocs) {
		// The probe sites get the start time of every call.
		env = append(env, "MDSHIM_RECORD=1")
	}
	if depth, ok := s.probes.BatchDepth(); ok {
		// Each thread hands its calls over a batch at a time.
		env = append(env, fmt.Sprintf("MDSHIM_BATCH=%d", depth))
	}
	if s.flags.SampleBytes > 0 {
		env = append(env, fmt.Sprintf("MDSHIM_SAMPLE_BYTES=%d", s.flags.SampleBytes))
		fmt.Fprintf(s.stderr, "mdtrace: sampling one allocation every %d bytes on average: block counts and byte totals in the reports are estimates, sizes are exact\n", s.flags.SampleBytes)
	}
	var extra []*os.File
	if logFile != nil {
		// The shim writes its errors into mdtrace's log file.
		extra = []*os.File{logFile}
		env = append(env, "MDSHIM_LOG_FD=3")
	}
	return env, extra, nil
}

// shimPath returns the absolute path of the shim: --shim, or libmdshim.so
// next to mdtrace.
func shimPath(flags *Flags) (string, error) {
	shim := flags.Shim
	if shim == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the shim: %w", err)
		}
		shim = filepath.Join(filepath.Dir(exe), "libmdshim.so")
		if _, err := os.Stat(shim); err != nil {
			return "", fmt.Errorf("no shim next to mdtrace (%s; give --shim PATH)", shim)
		}
	}
	shim, err := filepath.Abs(shim)
	if err != nil {
		return "", err
	}
	if err := tracer.CheckExecutable(shim); err != nil {
		return "", fmt.Errorf("the shim (--shim): %w", err)
	}
	if strings.ContainsAny(shim, " :") {
		return "", fmt.Errorf("the shim's path %q holds a space or a colon, which LD_PRELOAD cannot", shim)
	}
	return shim, nil
}

// preloadable reports whether the shim may be preloaded, unasked, into
// the program a command runs. Its malloc is glibc's, so it replaces only
// glibc's: a program that brings its own allocator keeps it (with a note).
// A program mdtrace cannot trace gets nothing, so that its error is the
// one reported; a script gets the shim in its interpreter.
func preloadable(command string) (ok bool, note string) {
	path, err := exec.LookPath(command)
	if err != nil {
		return false, ""
	}
	lib, err := tracer.AllocatorOfFile(path, os.Environ())
	switch {
	case errors.Is(err, tracer.ErrNot64Bit) || errors.Is(err, tracer.ErrNoMalloc):
		return false, ""
	case err != nil:
		return true, ""
	case !strings.HasPrefix(filepath.Base(lib), "libc.so"):
		return false, fmt.Sprintf("%s has its own malloc in %s: the shim is not preloaded", command, lib)
	}
	return true, ""
}

// ready attaches the probes to the process; the Process calls it before a
// launched command runs its first instruction.
func (s *session) ready(pid int) error {
	var (
		lib, runtime string
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
	p := &proc{pid: pid, prog: prog}
	s.pmu.Lock()
	s.pid = pid
	s.procs[pid] = p
	s.pmu.Unlock()
	if err := s.attach(p, lib); err != nil {
		return err
	}
	s.probeRuntime(p, runtime)
	s.watchImage(p)
	if s.flags.ReadyFile != "" {
		if err := writeReadyFile(s.flags.ReadyFile, pid); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.stderr, "mdtrace: tracing process %d (%s): %s in %s\n", pid, prog, strings.Join(s.probes.Attached(pid), " "), lib)
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

// writeReadyFile writes the ready file: a PID and a newline.
func writeReadyFile(path string, pid int) error {
	content := fmt.Sprintf("%d\n", pid)
	if err := output.WriteFileAtomic(path, 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, content)
		return err
	}); err != nil {
		return fmt.Errorf("writing the ready file: %w", err)
	}
	return nil
}

// watchImage follows the libraries of the process's current program: its
// loader's changes from now on, and its maps as they are.
func (s *session) watchImage(p *proc) {
	if loader, err := tracer.LoaderOf(p.pid); err == nil && loader != "" {
		if err := s.probes.WatchLibraries(p.pid, loader); err != nil {
			s.notice("%v; frames of libraries unloaded with dlclose may stay unnamed", err)
		}
	}
	s.rememberMaps(p)
}

// execed follows the process into a new program: the old image's blocks
// are gone, and the new program may use another allocator and loader.
func (s *session) execed(pid int) {
	p := s.traced(pid)
	if p == nil {
		return
	}
	s.probes.Execed(pid)
	p.hist.Reset()
	prog := tracer.ProgName(pid)
	s.pmu.Lock()
	p.prog = prog
	s.pmu.Unlock()
	lib, runtime, err := tracer.AllocatorAndRuntimeOfExec(pid)
	if err != nil {
		s.notice("process %d executed a program mdtrace cannot trace: %v", pid, err)
		return
	}
	if !slices.Contains(p.libs, lib) {
		if err := s.attach(p, lib); err != nil {
			s.notice("%v", err)
		}
	}
	s.probeRuntime(p, runtime)
	s.watchImage(p)
}

// forked follows a child of a traced process, held before it runs: the
// same allocators are probed for it, and a zygote child (not a vfork)
// starts with a copy of its parent's table.
func (s *session) forked(parent, child int, vfork bool) {
	pp := s.traced(parent)
	if pp == nil {
		return
	}
	s.pmu.Lock()
	c := &proc{pid: child, prog: pp.prog}
	s.procs[child] = c
	libs := slices.Clone(pp.libs)
	s.pmu.Unlock()
	if err := s.probes.Fork(parent, child, !vfork); err != nil {
		s.notice("%v", err)
	}
	// The probes stay through an exec of a program on the same
	// allocator: a vfork child is probed now too.
	for _, lib := range libs {
		if err := s.attach(c, lib); err != nil {
			s.notice("process %d, forked from %d: %v", child, parent, err)
		}
	}
	// A vfork child runs in its parent's memory, with its parent's maps
	// and libraries, until it executes a program (watched then) or exits.
	if !vfork {
		s.watchImage(c)
	}
	fmt.Fprintf(s.stderr, "mdtrace: tracing process %d, forked from %d\n", child, parent)
}

// attach probes the allocator in lib for process p. In program mode the
// system's libc is probed for every process already.
func (s *session) attach(p *proc, lib string) error {
	var err error
	if lib != s.systemLib {
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
	s.finish(p)
	s.probes.Release(pid)
	if s.flags.Program != "" {
		s.dropProgramProc(pid)
	}
}

// finishAll writes the exit reports of every process still traced.
func (s *session) finishAll() {
	for _, p := range s.live() {
		s.finish(p)
	}
}

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
		return 1, nil, 0, 0, 0, 0
	}
	snap, err := s.probes.Snapshot(pid)
	if err != nil {
		s.notice("get_malloc_leak_info of process %d: %v", pid, err)
		return 0, nil, 0, 0, 0, 0
	}
	snap.BacktraceSize = s.cfg.BacktraceFrames
	snap.SampleBytes = s.flags.SampleBytes
	buf, overall, infoSize, total, btSize = snap.LeakInfo()
	return 0, buf, overall, infoSize, total, btSize
}

// adoptChild follows process pid, a child forked by a thread of a traced
// process that ptrace did not report, when forks are followed (launch
// mode, --follow-forks). The child waits in the shim's fork handler.
func (s *session) AdoptChild(pid int) bool {
	if s.flags.PID != 0 && !s.flags.FollowForks {
		return false
	}
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
	s.notice("refused a request on the shim's control socket from process %d: %s", pid, reason)
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
	if s.rec != nil && s.cfg.RecordAllocsOnExit {
		s.rec.WriteProcess(fmt.Sprintf("%s.%d", s.cfg.RecordAllocsFile, p.pid), p.pid)
	}
	if s.cfg.Has(options.LogAllocatorStatsOnExit) && s.ctl == nil {
		// A preloaded shim logs glibc's statistics itself.
		s.logStats(p)
	}
	if !s.cfg.Has(options.LeakTrack) && !(s.cfg.Has(options.Backtrace) && s.cfg.BacktraceDumpOnExit) && s.flags.Folded == "" {
		return
	}
	snap, maps, err := s.snapshot(p)
	if err != nil {
		s.notice("%v", err)
		return
	}
	if s.cfg.Has(options.LeakTrack) {
		report := output.LeakReport
		if s.cfg.Has(options.BacktraceFull) {
			report = output.LeakReportFull
		}
		report(s.log, p.prog, p.pid, p.pid, snap, s.frames(p, maps))
		if snap.SampleBytes > 0 && len(snap.Allocs) > 0 {
			_, est := snap.Sites()
			s.notice("sampled one allocation every %d bytes on average: the %d leaked blocks listed stand for about %d blocks, %d bytes",
				snap.SampleBytes, len(snap.Allocs), est.Blocks, est.Bytes)
		}
	}
	if s.cfg.Has(options.Backtrace) && s.cfg.BacktraceDumpOnExit {
		s.writeDump(p, fmt.Sprintf("%s.%d.exit.txt", s.cfg.BacktraceDumpPrefix, p.pid), snap, maps)
	}
	if s.flags.Folded != "" {
		// The first process's to FILE, any other's to FILE.PID.
		path := s.flags.Folded
		if p.pid != s.pid {
			path = fmt.Sprintf("%s.%d", path, p.pid)
		}
		line := func(pc uint64) (string, int, bool) { return s.sym.Line(p.pid, maps, pc) }
		err := output.WriteFileAtomic(path, 0o644, func(w io.Writer) error {
			return output.WriteFolded(w, snap, s.frames(p, maps), line)
		})
		if err != nil {
			s.notice("%v", err)
		}
	}
}

// snapshot reads the live table and the maps of a process.
func (s *session) snapshot(p *proc) (*leak.Snapshot, *stacks.Maps, error) {
	s.syncLibraries()
	snap, err := s.probes.Snapshot(p.pid)
	if err != nil {
		return nil, nil, err
	}
	snap.BacktraceSize = s.cfg.BacktraceFrames
	snap.SampleBytes = s.flags.SampleBytes
	maps, err := stacks.ReadMaps(p.pid)
	if err != nil {
		// The process is gone: frames are printed with what is known.
		maps = nil
	}
	return snap, maps, nil
}

func (s *session) frames(p *proc, maps *stacks.Maps) func([]uint64) []stacks.Frame {
	return func(pcs []uint64) []stacks.Frame {
		return s.sym.SymbolizeWithHistory(p.pid, maps, &p.hist, pcs)
	}
}

// watchLibraries remembers every library the loader reports, with its
// load address, until stop is called.
func (s *session) watchLibraries(n *tracer.NoticeReader) (sync, stop func()) {
	sync, stopPump := pump(n.Next, s.rememberLibrary, n.Wake)
	return sync, func() {
		n.Close()
		stopPump()
	}
}

// rememberLibrary adds a library the loader reported to the history. A
// relative path is the process's (dlopen of "lib/x.so"); a name without a
// slash is the vdso, which has no file.
func (s *session) rememberLibrary(lib tracer.Library) {
	path := lib.Path
	if !strings.Contains(path, "/") {
		return
	}
	if !filepath.IsAbs(path) {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", lib.PID))
		if err != nil {
			return
		}
		path = filepath.Join(cwd, path)
	}
	if p := s.traced(lib.PID); p != nil {
		p.hist.AddLibrary(path, lib.Base)
		s.probeRuntime(p, path)
	}
}

// probeRuntime probes the operator new of a C++ runtime library the process
// has loaded, once, so that a block from new has new's caller in its
// backtrace (see tracer.Attach). Not where the allocator has an operator
// new of its own, which takes the runtime's place: the shim's, jemalloc's,
// tcmalloc's (preloaded, or linked before the runtime as usual).
func (s *session) probeRuntime(p *proc, path string) {
	if !tracer.IsCxxRuntime(path) {
		return
	}
	s.pmu.Lock()
	libs := slices.Clone(p.libs)
	s.pmu.Unlock()
	if len(libs) == 0 || slices.Contains(libs, path) || tracer.DefinesNew(libs[0]) {
		return
	}
	// A process that is gone has no more blocks to name.
	if err := s.attach(p, path); err != nil && !errors.Is(err, tracer.ErrProcessGone) {
		s.notice("process %d: %v; blocks from new keep the runtime's frame instead of new's caller", p.pid, err)
	}
}

// rememberMaps adds the process's current maps to the history and parses
// the files of new mappings while they are mapped.
func (s *session) rememberMaps(p *proc) {
	maps, err := stacks.ReadMaps(p.pid)
	if err != nil {
		return
	}
	for _, m := range p.hist.Add(maps) {
		s.sym.Symbolize(p.pid, maps, []uint64{m.Start})
		s.probeRuntime(p, m.Path)
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
		Records:       snap.UniqueList(false),
	}
	if s.cfg.Has(options.BacktraceFull) {
		d.BtInfo = s.frames(p, maps)
	}
	if maps != nil {
		d.Maps = maps.Raw
	}
	s.log.Errorf(p.pid, p.pid, "Dumping to file: %s\n", path)
	if err := output.WriteFileAtomic(path, 0o644, func(w io.Writer) error { return output.WriteHeapDump(w, d) }); err != nil {
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
	for _, l := range lossLines(c, s.flags.MaxAllocs) {
		s.notice("%s", l)
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

// lossLines describes the non-zero loss counters.
func lossLines(c tracer.Counters, maxAllocs uint32) []string {
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
	return out
}

// checkPrivileges verifies the capabilities mdtrace needs: CAP_BPF and
// CAP_PERFMON (or CAP_SYS_ADMIN) to load programs and attach uprobes,
// CAP_SYS_PTRACE to hold processes at their exit.
func checkPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	admin := has(unix.CAP_SYS_ADMIN)
	var missing []string
	if !has(unix.CAP_BPF) && !admin {
		missing = append(missing, "CAP_BPF")
	}
	if !has(unix.CAP_PERFMON) && !admin {
		missing = append(missing, "CAP_PERFMON")
	}
	if !has(unix.CAP_SYS_PTRACE) {
		missing = append(missing, "CAP_SYS_PTRACE")
	}
	if len(missing) > 0 {
		return fmt.Errorf("needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (missing %s); try sudo", strings.Join(missing, ", "))
	}
	return nil
}
