//go:build linux

package tracer

import (
	"errors"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tracer thread waits for its tracees' stops in waitid itself, rather
// than for the SIGCHLD that tells of them: that signal goes through Go's
// handler, the os/signal goroutine and a channel before the thread wakes,
// about 0.1 to 0.3 ms a stop on the machines measured, several stops a
// followed child. A request for the tracer (Detach, Adopt, a freeze)
// interrupts that wait with ringSignal, sent to the thread alone.
//
// Go installs every handler with SA_RESTART, which would restart the wait
// after the signal. ringSignal's handler is Go's own, with SA_RESTART taken
// out: Go lets an unsubscribed real-time signal return from its handler,
// and mdtrace subscribes to none it does not send itself (its Android
// signals are 45 to 51).
const ringSignal = 62

// ringRetry is how often a request rings again until the tracer takes it:
// a ring that lands as the thread enters its wait is not seen.
const ringRetry = 2 * time.Millisecond

// ringTick rings the tracer every so often, whatever happens, so that it
// polls its tracees (and the threads of a freeze left to stop) as the
// loop did on its tick: a stop missed by the wait is then found too.
var ringTick = 200 * time.Millisecond

var (
	ringOnce sync.Once
	ringErr  error
)

// ringReady makes ringSignal interrupt the tracer's wait, once for the
// process; it reports whether it can.
func ringReady() bool {
	ringOnce.Do(func() { ringErr = unrestart(ringSignal) })
	return ringErr == nil
}

// kernelSigaction is the kernel's struct sigaction on x86-64
// (rt_sigaction with an 8-byte mask).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const (
	sigDFL    = 0
	sigIGN    = 1
	saRestart = 0x10000000
)

// unrestart takes SA_RESTART out of the handler of sig, which must be
// Go's (installed at start for every signal).
func unrestart(sig int) error {
	var sa kernelSigaction
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&sa)), 8, 0, 0); e != 0 {
		return e
	}
	if sa.handler == sigDFL || sa.handler == sigIGN {
		return errors.New("the signal has no handler of Go's")
	}
	sa.flags &^= saRestart
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0); e != 0 {
		return e
	}
	return nil
}

// ring interrupts the tracer's wait, if it is in it.
func (p *Process) ring() {
	if p.waiting.Load() {
		unix.Tgkill(os.Getpid(), p.tracerTID, unix.Signal(ringSignal))
	}
}

// ringEvery rings the tracer every d until stop is closed.
func (p *Process) ringEvery(d time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			p.ring()
		case <-stop:
			return
		}
	}
}

// errGaveUp is send's error when give fired first.
var errGaveUp = errors.New("gave up")

// send hands r to the control goroutine, ringing it out of its wait until
// it takes r. It returns ErrProcessGone once the process is done,
// errGaveUp when give fires first (nil: never).
func (p *Process) send(r request, give <-chan time.Time) error {
	retry := time.NewTicker(ringRetry)
	defer retry.Stop()
	for {
		p.ring()
		select {
		case p.reqq <- r:
			return nil
		case <-p.done:
			return ErrProcessGone
		case <-give:
			return errGaveUp
		case <-retry.C:
		}
	}
}

// waitAny waits until one of the thread's tracees (or children) has a
// stop or exit to report, without taking it (WNOWAIT), and returns its
// PID. It returns EINTR when rung.
func (p *Process) waitAny() (int, error) {
	var info unix.Siginfo
	p.waiting.Store(true)
	// __WNOTHREAD: this thread's tracees only, not another tracer's.
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT|unix.WALL|unix.WNOTHREAD, nil)
	p.waiting.Store(false)
	if err != nil {
		return 0, err
	}
	return siginfoPID(&info), nil
}

// siginfoPID is si_pid of a waitid siginfo: after si_signo, si_errno,
// si_code and the union's alignment.
func siginfoPID(info *unix.Siginfo) int {
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), 16)))
}
