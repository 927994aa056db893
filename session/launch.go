//go:build linux

package session

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/ctl"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// launchEnv is the environment of a launched command, nil for mdtrace's
// own, and the files it inherits from descriptor 3 on. The shim is
// preloaded when the options need it and, unless --no-preload, for its
// probe sites, which cost the traced program a fraction of probes on the
// allocator itself.
func (s *session) launchEnv(logFile *os.File, pcfg tracer.ProbeConfig) ([]string, []*os.File, error) {
	need := options.NeedsShim(s.cfg) || s.flags.SampleBytes > 0
	if !need && s.flags.NoPreload {
		return nil, nil, nil
	}
	if need && staticExecutable(s.flags.Command[0]) {
		// The loader preloads the shim; a static executable has none,
		// and would run with no check at all.
		what := "--sample-bytes"
		if names := options.ShimOptionsOf(s.cfg); len(names) > 0 {
			what = "option " + strings.Join(names, ", ")
		}
		return nil, nil, fmt.Errorf("%s is statically linked: no dynamic loader preloads the shim, which %s needs (without it, mdtrace probes the program's allocator)", s.flags.Command[0], what)
	}
	shim, err := shimPath(s.flags)
	if err == nil && s.user != nil {
		// The loader opens the shim as the user the command runs as.
		if rerr := s.user.canRead(shim); rerr != nil {
			err = fmt.Errorf("the shim cannot be preloaded: %w (make install puts it where every user can read it; or give --shim a copy %s can read)", rerr, s.user.name)
		}
	}
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
	s.shim = shim
	env := tracer.PreloadEnv(os.Environ(), shim, options.EnvVar+"="+s.flags.Options)
	// The shim's signal handlers and get_malloc_leak_info reach mdtrace
	// through its control socket, which only root and the user the
	// program runs as can connect to.
	uid, gid := os.Geteuid(), os.Getegid()
	if s.user != nil {
		uid, gid = int(s.user.cred.Uid), int(s.user.cred.Gid)
	}
	if err := s.listenCtl(uid, gid); err != nil {
		return nil, nil, err
	}
	env = append(env, s.ctl.Env())
	if s.exitCheck() {
		// The check at exit, from the shim's last destructor.
		env = append(env, abi.EnvExitCheck+"=1")
	}
	if s.cfg.Has(options.RecordAllocs) || s.flags.Stats {
		// The probe sites get the start time of every call.
		env = append(env, abi.EnvRecord+"=1")
	}
	if depth, ok := pcfg.BatchDepth(); ok {
		// Each thread hands its calls over a batch at a time.
		env = append(env, fmt.Sprintf("%s=%d", abi.EnvBatch, depth))
	}
	if s.flags.SampleBytes > 0 {
		env = append(env, fmt.Sprintf("%s=%d", abi.EnvSampleBytes, s.flags.SampleBytes))
		fmt.Fprintf(s.stderr, "mdtrace: sampling one allocation every %d bytes on average: block counts and byte totals in the reports are estimates, sizes are exact\n", s.flags.SampleBytes)
	}
	var extra []*os.File
	if logFile != nil {
		// The shim writes its errors into mdtrace's log file.
		extra = []*os.File{logFile}
		env = append(env, abi.EnvLogFD+"=3")
	}
	return env, extra, nil
}

// listenCtl makes the session's control socket, which only root and user
// uid can connect to: the shim's requests of the processes traced, and
// another mdtrace's (mdtrace unreachable).
func (s *session) listenCtl(uid, gid int) error {
	// A request that comes before the process is probed (it started
	// early) waits for it.
	srv, err := ctl.ListenAs(uid, gid, func(pid int) bool {
		<-s.setupc
		return s.traced(pid) != nil
	}, s)
	if err != nil {
		return err
	}
	s.ctl = srv
	return nil
}

// shimName is the file name of the shim.
const shimName = "libmdshim.so"

// shimPath returns the absolute path of the shim: --shim, or the one
// installed with mdtrace (options.Installed).
func shimPath(flags *options.Flags) (string, error) {
	shim := flags.Shim
	if shim == "" {
		found, tried, err := options.Installed(shimName)
		if err != nil {
			return "", fmt.Errorf("finding the shim: %w", err)
		}
		if found == "" {
			return "", fmt.Errorf("no shim next to mdtrace or where make install puts it (%s; give --shim PATH)", strings.Join(tried, ", "))
		}
		shim = found
	}
	shim, err := filepath.Abs(shim)
	if err != nil {
		return "", err
	}
	if err := tracer.CheckExecutable(shim); err != nil {
		return "", fmt.Errorf("the shim (--shim): %w", err)
	}
	if err := tracer.CheckShimInterface(shim); err != nil {
		return "", err
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
	case !stacks.IsLibc(lib.Name):
		return false, fmt.Sprintf("%s has its own malloc in %s: the shim is not preloaded", command, lib)
	}
	return true, ""
}

// staticExecutable reports whether command runs an ELF executable without
// a program interpreter (static, or static-pie): no dynamic loader, so no
// LD_PRELOAD. A script, or a file that cannot be read, is not one.
func staticExecutable(command string) bool {
	path, err := exec.LookPath(command)
	if err != nil {
		return false
	}
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	// The dynamic loader run as a command preloads for the program it runs.
	if names, err := f.DynString(elf.DT_SONAME); err == nil && len(names) > 0 && strings.HasPrefix(names[0], "ld-linux") {
		return false
	}
	return f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN
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
