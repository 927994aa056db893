//go:build linux

package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/ctl"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/suppress"
	"github.com/mdtrace/mdtrace/tracer"
)

// session is one run of mdtrace on one process.
type session struct {
	flags *options.Flags
	// sampleBytes is the sampling interval of the reports' estimates, 0
	// if every allocation is seen; probeSample is set when the probes
	// sample (on the allocator), rather than a shim.
	sampleBytes uint64
	probeSample bool
	// depth is the frame limit of the backtraces taken, 0 for none.
	depth int
	// rules are the suppressions of the leak reports; leaks adds up
	// what the leak reports of leakReports processes listed and left out.
	// shim is the shim preloaded into launched commands, "" if none.
	shim        string
	rules       []suppress.Rule
	leaks       output.LeakSummary
	leakReports int
	cfg         *options.Config
	stderr      io.Writer
	log         *output.Log
	// logToStderr is set when the log is standard error, so that summaries
	// are not printed twice.
	logToStderr bool

	probes *tracer.Probes
	sym    *stacks.Symbolizer
	// syncLibraries and syncErrors return once every library notice and
	// pointer error sent so far is handled, syncDeferred once every walk
	// the probes left to mdtrace is finished.
	syncLibraries, syncErrors, syncDeferred func()
	// walksQuiet reports whether no walk of a process is left for mdtrace
	// to finish, or on its way (watchDeferred).
	walksQuiet func(pid int) bool
	// unknownSuppressed counts unknown pointers not reported.
	unknownSuppressed int
	rec               *recorder // record_allocs
	proc              *tracer.Process
	// unheld is set when the attached process is not held with ptrace:
	// its exit hook comes once it is gone.
	unheld bool
	// injected is the shim --inject loaded into the attached process.
	injected *tracer.Injected
	// injectRouted and injectUnrouted count its GOT slots routed and not.
	injectRouted, injectUnrouted int

	// mu serializes the reports and guards the procs' finished flags;
	// pmu, taken after mu if both are, guards procs and each
	// proc's prog and libs. The library watcher takes only pmu, so a
	// report can wait for it while holding mu.
	mu    sync.Mutex
	pmu   sync.Mutex
	ctl   *ctl.Server   // the control socket: the shim's requests, and mdtrace unreachable's
	user  *runAs        // the user a launched command runs as (-u), or nil
	pid   int           // the process launched or attached to
	procs map[int]*proc // it and, with forks followed, its descendants
	// systemLib is, in program mode, the system's libc, whose probes have
	// no PID filter.
	systemLib stacks.File
	// programPaths are, in program mode, the paths that the processes
	// matched executed (their parent's, for forks), under pmu.
	programPaths map[int]string
	// btOn is whether backtraces are on (signal 45 toggles them); the
	// library watcher reads it too, which takes no mu.
	btOn  atomic.Bool
	start time.Time // when tracing began
	// sigCount counts the malloc debug signals sent to mdtrace, which the
	// Go runtime merges when they come faster than mdtrace takes them (nil
	// if it could not be loaded); sigSeen are the counts already acted on,
	// by signal number from 45. Both are used by the loop that takes the
	// signals alone.
	sigCount *tracer.SignalCounter
	sigSeen  [options.LogAllocatorStatsSignal - options.BacktraceEnableSignal + 1]uint64
	// setupc is closed once the probes are loaded and the first process
	// is probed; setupErr says why not, if it failed. What a launched
	// command that started early (early.go) asks for waits for it.
	setupc   chan struct{}
	setupErr error
	// aheadc, for a launched command, is closed once its files' tables
	// are being parsed ahead (tracer.ParseUnwindAhead): the first ready
	// waits for it before it drops those not taken.
	aheadc chan struct{}
	// early is set when the launched command started early; readyAt
	// holds, under pmu, the processes whose shim started early and the
	// address of its word (0: not known yet).
	early   bool
	readyAt map[int]uint64
	// later, in launch mode, holds the descendants whose exit reports are
	// written once they are gone (exits.go); nil in the other modes.
	later *laterExits
}

// proc is one traced process.
type proc struct {
	pid      int
	prog     string
	libs     []stacks.File      // the allocator files probed
	late     bool               // attached to as it ran (-p): its blocks from before are not in the table
	hist     stacks.MapsHistory // every library the process has mapped
	finished bool               // the exit reports are written
	// lastMaps are the maps last read, for the reports written once a
	// process not held is gone (gone), its maps with it.
	lastMaps *stacks.Maps
	gone     bool
	// leaderLeft: its main thread ended alone, and it ran on (leaderLeft).
	leaderLeft bool
	// exitScan is the check for unreachable memory that the shim's last
	// destructor asked for, while every thread still ran; nil if none.
	exitScan *unreachScan
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

// probeSampleBytes is the probes' sampling interval: 0 unless they sample.
func (s *session) probeSampleBytes() uint64 {
	if !s.probeSample {
		return 0
	}
	return s.sampleBytes
}

// launchGrace is how long mdtrace waits, after SIGINT or SIGTERM, for a
// launched command to exit by itself (a terminal's Ctrl-C reaches both).
const launchGrace = time.Second

// Run traces the process the flags name and returns the exit status.
func Run(flags *options.Flags, cfg *options.Config, stderr io.Writer) (int, error) {
	if err := CheckPrivileges(); err != nil {
		return 1, err
	}
	if err := options.CheckUnreachable(flags, cfg); err != nil {
		return 2, err
	}
	s := &session{flags: flags, cfg: cfg, stderr: stderr, sym: stacks.NewSymbolizer(), procs: map[int]*proc{}, sampleBytes: flags.SampleBytes}
	// With probes on the allocator (-p alone, --program, --no-preload)
	// the probes sample: a command launched without the shim needs none
	// for it, and launchEnv reads the flags' SampleBytes as the shim's.
	if flags.SampleBytes > 0 && (flags.PID != 0 && !flags.Inject || flags.Program != "" || flags.NoPreload) {
		s.probeSample = true
		shimFlags := *flags
		shimFlags.SampleBytes = 0
		s.flags = &shimFlags
	}
	if flags.PID == 0 && flags.Program == "" {
		s.startLaterExits()
	}
	s.sym.DebugDirs = flags.DebugDirs
	rules, err := Suppressions(flags)
	if err != nil {
		return 1, err
	}
	s.rules = rules
	logw := stderr
	var logFile *os.File
	if flags.Log != "" {
		f, err := output.CreateFile(flags.Log, flags.FileMode)
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
	s.depth = depth
	s.btOn.Store(cfg.BacktraceEnabled || !cfg.BacktraceEnableOnSignal)
	pcfg := tracer.ProbeConfig{
		StackDepth:        depth,
		BacktraceMinSize:  cfg.BacktraceMinSizeBytes,
		BacktraceMaxSize:  cfg.BacktraceMaxSizeBytes,
		BacktraceOff:      !s.btOn.Load(),
		MaxAllocs:         flags.MaxAllocs,
		Record:            cfg.Has(options.RecordAllocs) || flags.Stats,
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
		// With --inject they are, and mdtrace drops those kept frees
		// that no batch can match any more (sweepOrphans).
		NoBatch:     flags.PID != 0 && !flags.Inject || flags.Program != "" || flags.All || flags.NoBatch || flags.SampleBytes > 0,
		SampleBytes: s.probeSampleBytes(),
	}
	// The programs load in the background, and the signal counter's
	// beside them: each is tens of milliseconds that a launched command
	// held at its exec waits for. The count starts before the signals
	// are caught (below): each one caught is counted. A launched command
	// that can start early (early.go) starts before both, which would
	// take the CPU it needs.
	type loaded struct {
		probes *tracer.Probes
		err    error
	}
	loadc := make(chan loaded, 1)
	loading := false
	load := func() {
		loading = true
		counting := make(chan struct{})
		go func() {
			defer close(counting)
			s.countSignals()
		}()
		go func() {
			probes, err := tracer.LoadProbes(pcfg)
			<-counting
			loadc <- loaded{probes, err}
		}()
	}
	s.setupc = make(chan struct{})
	launching := flags.PID == 0 && flags.Program == ""
	if launching {
		// The command's unwind tables are parsed beside the programs'
		// load, placed once they are loaded (tracer/unwindahead.go).
		s.aheadc = make(chan struct{})
		go func() {
			defer close(s.aheadc)
			if path, err := exec.LookPath(flags.Command[0]); err == nil {
				tracer.ParseUnwindAhead(tracer.ProgramFiles(path, os.Environ()))
			}
		}()
	}
	if !launching || !s.mayStartEarly(pcfg) {
		load()
	}
	var (
		env   []string
		extra []*os.File
		cred  *syscall.Credential
		sigs  chan os.Signal
		// pre takes the signals of a command started early until the
		// signal counter is loaded (handleUncounted).
		pre   chan os.Signal
		early bool
	)
	if launching {
		err := s.prepareLaunch(logFile, pcfg, &env, &extra, &cred)
		if s.ctl != nil {
			defer s.ctl.Close()
		}
		if err == nil && s.mayStartEarly(pcfg) {
			if s.shim != "" {
				early = true
				pre = s.catchSignals()
				defer signal.Stop(pre)
				err = s.launchEarly(env, extra, cred)
			}
			load()
		}
		if err != nil {
			if !loading {
				return 1, err
			}
			if r := <-loadc; r.probes != nil {
				r.probes.Close()
			}
			if s.sigCount != nil {
				s.sigCount.Close()
			}
			return 1, s.failEarly(early, err)
		}
	}
	r := <-loadc
	probes, err := r.probes, r.err
	if s.sigCount != nil {
		defer s.sigCount.Close()
	}
	var verr *tracer.VerifierError
	if errors.As(err, &verr) && cfg.Has(options.Verbose) {
		fmt.Fprintln(stderr, verr.Log())
	}
	if err != nil {
		s.failEarly(early, err)
		return 1, err
	}
	defer probes.Close()
	s.probes = probes
	if probes.Unguarded {
		fmt.Fprintf(stderr, "mdtrace: note: %s\n", tracer.UnguardedNote)
	}
	if s.probeSample {
		fmt.Fprintf(stderr, "mdtrace: sampling one allocation every %d bytes on average: block counts and byte totals in the reports are estimates, sizes are exact\n", s.sampleBytes)
	}
	if cfg.Has(options.RecordAllocs) || flags.Stats {
		if s.rec, err = newRecorder(s, cfg.RecordAllocsNumEntries, cfg.Has(options.RecordAllocs), flags.Stats); err != nil {
			return 1, s.failEarly(early, err)
		}
		defer s.rec.Close()
	}

	notices, err := probes.LibraryNotices()
	if err != nil {
		return 1, s.failEarly(early, err)
	}
	var stopWatch func()
	s.syncLibraries, stopWatch = s.watchLibraries(notices)
	defer stopWatch()
	walks, err := probes.DeferredWalks()
	if err != nil {
		return 1, s.failEarly(early, err)
	}
	var stopWalks func()
	s.syncDeferred, s.walksQuiet, stopWalks = s.watchDeferred(walks)
	defer stopWalks()
	s.syncErrors = func() {}
	if verify {
		sync, stop, err := s.watchPointerErrors()
		if err != nil {
			return 1, s.failEarly(early, err)
		}
		s.syncErrors = sync
		defer stop()
	}

	// Signals are caught from here on (a command started early: since
	// it started, on pre): none may kill mdtrace while a launched
	// command is held stopped, or waits for it.
	sigs = s.catchSignals()
	defer signal.Stop(sigs)
	if pre != nil {
		signal.Stop(pre)
	}

	if flags.Program != "" || flags.PID != 0 {
		// Another mdtrace asks for checks for unreachable memory on
		// the control socket (mdtrace unreachable -p PID); a launched
		// command's is made with its environment.
		if err := s.listenCtl(os.Geteuid(), os.Getegid()); err != nil {
			return 1, err
		}
		defer s.ctl.Close()
	}
	if flags.Program != "" {
		close(s.setupc)
		return s.runProgram(sigs)
	}
	hooks := tracer.Hooks{Ready: s.ready, Exit: s.exiting, Exec: s.execed, LeaderLeft: s.leaderLeft}
	if flags.PID == 0 || flags.FollowForks {
		hooks.Fork = s.forked
	}
	hooks.Gone = s.gone
	if flags.PID != 0 {
		close(s.setupc)
		if why := s.holdReasons(); len(why) > 0 {
			fmt.Fprintf(stderr, "mdtrace: holding process %d with ptrace for %s: debuggers and profilers cannot attach to it while mdtrace runs\n", flags.PID, strings.Join(why, "; "))
			s.proc, err = tracer.Attach(flags.PID, hooks)
		} else {
			s.unheld = true
			s.proc, err = tracer.AttachUnheld(flags.PID, hooks, probes)
		}
	} else if early {
		err = s.readyEarly()
	} else {
		close(s.setupc)
		s.proc, err = tracer.LaunchAs(flags.Command, env, extra, cred, hooks)
	}
	if err != nil {
		return 1, s.failEarly(early, err)
	}
	if s.unheld {
		defer s.keepMaps()()
	}

	interrupted := s.handleUncounted(pre)
	var tick <-chan time.Time
	if flags.Interval > 0 {
		t := time.NewTicker(flags.Interval)
		defer t.Stop()
		tick = t.C
	}
loop:
	for interrupted == 0 {
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
	s.pendingSignals(sigs)
	if interrupted != 0 {
		if flags.PID == 0 {
			select {
			case <-s.proc.Done():
				interrupted = 0
			case <-time.After(launchGrace):
			}
		}
		if interrupted != 0 {
			s.uninject()
			s.finishAll()
			if err := s.proc.Detach(); err != nil {
				fmt.Fprintf(stderr, "mdtrace: %v\n", err)
			}
		}
	}
	st, _ := s.proc.Wait()
	s.flushExits()
	s.finishAll()
	probes.Detach()
	s.reportLosses()
	s.bottomLine()
	if flags.PID != 0 {
		// Interrupting is how tracing an attached process normally ends.
		if interrupted != 0 {
			return 0, nil
		}
		// mdtrace is not the process's parent: its exit status is said,
		// and is mdtrace's, as a launched command's is.
		fmt.Fprintf(stderr, "mdtrace: %s\n", endedLine(s.pid, s.progName(s.pid), st))
		return st.Code, nil
	}
	if interrupted != 0 {
		return 128 + int(interrupted), nil
	}
	if st.Known {
		return st.Code, nil
	}
	return 0, nil
}

// holdReasons are the features that need an attached process held with
// ptrace for as long as mdtrace runs, none if it need not be: its memory
// at its exit, or its forks as they happen. Otherwise mdtrace holds no
// ptrace on it, and the reports at its exit are written once it is gone,
// from the maps and files mdtrace kept.
func (s *session) holdReasons() []string {
	var why []string
	if s.flags.Hold {
		why = append(why, "--hold")
	}
	if s.flags.FollowForks {
		why = append(why, "--follow-forks (its children are followed from their fork)")
	}
	if s.exitCheck() {
		why = append(why, "the check for unreachable memory at its exit (--unreachable-only, --unreachable-first), which reads its memory there")
	}
	if s.cfg.Has(options.AbortOnError) {
		why = append(why, "abort_on_error (it is held at its exit until its error is written)")
	}
	return why
}

// CheckPrivileges verifies the capabilities mdtrace needs: CAP_BPF and
// CAP_PERFMON (or CAP_SYS_ADMIN) to load programs and attach uprobes,
// CAP_SYS_PTRACE to hold processes at their exit.
func CheckPrivileges() error {
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

// endedLine says how process pid, running prog, ended.
func endedLine(pid int, prog string, st tracer.ExitStatus) string {
	switch {
	case st.Unseen:
		return fmt.Sprintf("process %d (%s) exited; mdtrace did not see its exit status", pid, prog)
	case !st.Known:
		return fmt.Sprintf("process %d (%s) exited; its parent took its exit status first", pid, prog)
	case st.Signal != 0:
		return fmt.Sprintf("process %d (%s) was killed by signal %d (%s)", pid, prog, int(st.Signal), unix.SignalName(st.Signal))
	}
	return fmt.Sprintf("process %d (%s) exited with status %d", pid, prog, st.Code)
}

// progName returns the program of traced process pid as mdtrace last
// knew it.
func (s *session) progName(pid int) string {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if p := s.procs[pid]; p != nil {
		return p.prog
	}
	return strconv.Itoa(pid)
}
