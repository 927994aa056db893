//go:build linux

package session

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
)

// An audit's first injections were priced at auditInjectCost, the cost on
// the slowest machines tried, until three were made (priced): a process
// ran as long again trapping before it was taken where injections cost a
// third of that. A sqlite3 run of 27 ms alone took 49.7 ms under a new
// audit at 16 ms, 39.4 at 5 (8 interleaved runs, medians, on a VM of
// 0.7 µs traps). The audit now prices one as it starts, on a shell of its
// own (priceShell, calibrate).

// priceShellWait bounds the wait for the shell to start.
const priceShellWait = 2 * time.Second

// priceShell is auditShell started by the audit, waiting to read a line:
// the process an injection is priced on. It runs on the system's libc by
// the definition of it (auditShell), is started before the probes are on
// that libc (its blocks are not counted), and is killed with SIGKILL, its
// blocks forgotten, once priced; if mdtrace dies first, its input closes,
// and it ends. (Not Pdeathsig: that kills it when the thread that started
// it ends, as mdtrace's tracer threads do: about 1 audit in 30 lost its
// shell that way.)
type priceShell struct {
	cmd   *exec.Cmd
	input io.WriteCloser
	// ready is closed once the shell has said its line, or its output
	// ended; readyErr says which.
	ready    chan struct{}
	readyErr error
}

// startPriceShell starts the shell. It says a line once running, then
// waits on its input.
func startPriceShell() (*priceShell, error) {
	cmd := exec.Command(auditShell, "-c", "echo; read -r line")
	// Nothing of mdtrace's environment (a preload, a locale) goes to it.
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	input, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		input.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		input.Close()
		return nil, err
	}
	s := &priceShell{cmd: cmd, input: input, ready: make(chan struct{})}
	go func() {
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			s.readyErr = fmt.Errorf("%s ended before it started (%v)", auditShell, err)
		}
		close(s.ready)
		io.Copy(io.Discard, out)
	}()
	return s, nil
}

// waitReady waits until the shell waits on its input.
func (s *priceShell) waitReady() error {
	select {
	case <-s.ready:
		return s.readyErr
	case <-time.After(priceShellWait):
		return fmt.Errorf("%s did not start within %v", auditShell, priceShellWait)
	}
}

// end kills the shell and reaps it.
func (s *priceShell) end() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.input.Close()
	s.cmd.Wait()
}

// calibrate prices an injection on shell s: the time from its start to
// the route, the shim loaded and started, its sites probed and its calls
// routed; then they are given back. That is what an injection costs a
// process that calls the allocator all along, held or trapping between
// its holds: the shell's holds alone, 1.8 to 3.9 ms on a VM of 0.5 µs
// traps where the whole took 2.7 to 4.8, priced the busy processes' 3 to
// 9 below what the injections made in them cost, and had python3's short
// run (38 ms alone, 6400 calls or so) taken at its 4496th call, where its
// traps would have cost it less. The shell is ended, and whatever the
// probes hold of it forgotten.
func (ij *auditInjector) calibrate(s *priceShell) (time.Duration, error) {
	pid := s.cmd.Process.Pid
	defer func() {
		s.end()
		ij.probes.Forget(pid)
	}()
	if err := s.waitReady(); err != nil {
		return 0, err
	}
	st, err := stampOf(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	// Without its unwind tables: its stacks are never walked, and with
	// --backtrace the first tables placed in the audit (the C library's
	// among them) priced the shell's injection at 12 to 17 ms here
	// instead of 3 to 4.
	r, err := ij.load(pid, st, false)
	if err != nil {
		return 0, err
	}
	price := time.Since(t0)
	_, err = r.in.Stop()
	// Its probes' links are closed before the audit is ready, not in
	// the background as a process's that ended: their removal waits for
	// the kernel's grace periods, and a process started meanwhile ran
	// slower (python3's 38 ms run, 45.2 ms under the audit instead of
	// 43.1, started at once; 43.6 started 0.3 s later).
	ij.probes.DetachFile(pid, stacks.LocalFile(ij.shim))
	ij.release(pid)
	if err != nil {
		return 0, fmt.Errorf("giving its calls back: %w", err)
	}
	if r.in.Held <= 0 {
		return 0, errors.New("the injection held it no time")
	}
	return price, nil
}
