//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/tracer"
)

// An early start: the verifier takes most of mdtrace's start-up (about
// 100 of 150 ms), which a launched command held at its exec would wait
// for. When the shim is preloaded for its batches alone, the command
// starts at once instead, while the programs load: its shim holds its
// threads' batches (abi.EnvEarly) until mdtrace has probed the process
// and writes its word (tracer.AnnounceReady). A thread whose batch fills,
// or whose call must go to an unbatched site (realloc, a signal handler's
// call), waits for it meanwhile, and so do a thread's end and the
// process's exit. What needs each call's probe at once keeps the hold at
// the exec: record_allocs and --stats (each call's time), --sample-bytes,
// --no-batch, --no-preload, the shim's own options (guard, fill, ...),
// and a program that does not get the shim.

// announceTimeout bounds the wait for a shim that started early to say it
// waits (it does so as it starts, right after the loader has mapped it).
const announceTimeout = 10 * time.Second

// prepareLaunch makes what a launched command needs before it starts: the
// user it runs as, its environment, the control socket.
func (s *session) prepareLaunch(logFile *os.File, pcfg tracer.ProbeConfig, env *[]string, extra *[]*os.File, cred **syscall.Credential) error {
	var err error
	if s.flags.User != "" {
		if s.user, err = lookupUser(s.flags.User); err != nil {
			return err
		}
		*cred = s.user.cred
	}
	if *env, *extra, err = s.launchEnv(logFile, pcfg); err != nil {
		return err
	}
	if s.ctl == nil {
		// Without the shim, for mdtrace unreachable alone.
		if err := s.listenCtl(os.Geteuid(), os.Getegid()); err != nil {
			return err
		}
	}
	if s.user != nil {
		*env = s.user.env(*env)
	}
	return nil
}

// mayStartEarly reports whether the launched command may start before its
// probes are loaded, if the shim is preloaded (s.shim, known once the
// launch is prepared): it batches, has no option of its own, and no call
// needs its probe at once.
func (s *session) mayStartEarly(pcfg tracer.ProbeConfig) bool {
	_, batched := pcfg.BatchDepth()
	return batched && !options.NeedsShim(s.cfg) && s.flags.SampleBytes == 0 && !s.flags.NoPreload
}

// catchSignals catches the signals mdtrace acts on, from now on: none may
// kill mdtrace while a launched command is held, or waits for it.
func (s *session) catchSignals() chan os.Signal {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP,
		syscall.Signal(options.BacktraceEnableSignal), syscall.Signal(options.RecordAllocsSignal),
		syscall.Signal(options.BacktraceDumpSignal), syscall.Signal(options.CheckUnreachableSignal),
		syscall.Signal(options.LogAllocatorStatsSignal))
	return sigs
}

// launchEarly starts the command at once. Its exit, execs and forks wait
// for the setup (s.setupc), held by ptrace meanwhile: they need the probes.
func (s *session) launchEarly(env []string, extra []*os.File, cred *syscall.Credential) error {
	s.early = true
	// The shim looks for mdtrace by its pid while it waits: if mdtrace dies
	// before it is ready, the command goes on at once.
	env = append(env, fmt.Sprintf("%s=%d", abi.EnvEarly, os.Getpid()))
	setup := func() bool {
		<-s.setupc
		return s.setupErr == nil
	}
	hooks := tracer.Hooks{
		// Probed once the probes are loaded (readyEarly).
		Ready: func(int) error { return nil },
		Exit: func(pid int) {
			if !setup() {
				return
			}
			if pid == s.proc.PID && !s.probes.EarlyListed(pid) {
				// Gone before its shim was told (_exit): its
				// batches are all still listed.
				s.listEarly(pid)
			}
			s.pmu.Lock()
			delete(s.readyAt, pid)
			s.pmu.Unlock()
			s.exiting(pid)
		},
		Exec: func(pid int) {
			if !setup() {
				return
			}
			// The new program's shim does not start early.
			s.pmu.Lock()
			delete(s.readyAt, pid)
			s.pmu.Unlock()
			s.execed(pid)
		},
		Gone: s.gone,
		LeaderLeft: func(pid int) {
			if setup() {
				s.leaderLeft(pid)
			}
		},
		Fork: func(parent, child int, vfork bool) {
			if !setup() {
				unix.Kill(child, unix.SIGKILL)
				return
			}
			s.forked(parent, child, vfork)
			// A child forked before its parent was told has the
			// word as its parent had it, at the same address.
			s.pmu.Lock()
			at, ok := s.readyAt[parent]
			if ok && !vfork {
				s.readyAt[child] = at
			}
			s.pmu.Unlock()
			if ok && !vfork {
				go s.announce(child, at)
			}
		},
	}
	var err error
	s.proc, err = tracer.LaunchAs(s.flags.Command, env, extra, cred, hooks)
	return err
}

// readyEarly probes the command that started early, as ready does for
// one held at its exec, and tells its shim.
func (s *session) readyEarly() error {
	pid := s.proc.PID
	if err := s.ready(pid); err != nil {
		return err
	}
	s.listEarly(pid)
	s.readyAt = map[int]uint64{pid: 0}
	close(s.setupc)
	go s.announce(pid, 0)
	return nil
}

// listEarly makes the reports of process pid read the batches its shim
// has not registered with the probes yet, once the shim is mapped.
func (s *session) listEarly(pid int) {
	if at, err := tracer.ShimEarlyList(pid, s.shim); err == nil && at != 0 {
		s.probes.ListEarly(pid, at)
	}
}

// announce tells the shim of process pid, which started early, that its
// probes are in place; at is its word's address if known, else 0. The
// reports read its list of buffers before it is told.
func (s *session) announce(pid int, at uint64) {
	at, err := tracer.AnnounceReady(pid, s.shim, at, announceTimeout, func(uint64) {
		if !s.probes.EarlyListed(pid) {
			s.listEarly(pid)
		}
	}, func() bool {
		// Its exec or its exit took it out.
		s.pmu.Lock()
		defer s.pmu.Unlock()
		_, ok := s.readyAt[pid]
		return !ok
	})
	s.pmu.Lock()
	if _, ok := s.readyAt[pid]; ok && at != 0 {
		s.readyAt[pid] = at
	}
	s.pmu.Unlock()
	switch {
	case err == nil, errors.Is(err, tracer.ErrProcessGone):
	default:
		s.notice("process %d: %v: its calls may wait for mdtrace up to %d ms, and be missed after", pid, err, abi.EarlyWaitMs)
	}
}

// failEarly ends a command that started early when mdtrace cannot trace
// it, and returns err.
func (s *session) failEarly(early bool, err error) error {
	if !early {
		return err
	}
	select {
	case <-s.setupc:
		return err
	default:
	}
	s.setupErr = err
	close(s.setupc)
	if s.proc == nil {
		return err
	}
	unix.Kill(s.proc.PID, unix.SIGKILL)
	s.proc.Wait()
	return fmt.Errorf("%w (the command, started meanwhile, was killed)", err)
}
