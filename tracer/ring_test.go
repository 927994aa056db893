//go:build linux

package tracer

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestRingServesRequests: a loop that waits in waitid, with nothing to
// wake it but a ring (no tick), takes an adoption and a detach at once;
// the process detached runs on, traced by none.
func TestRingServesRequests(t *testing.T) {
	// The shell is this test's child: tracing it needs no privilege.
	if !ringReady() {
		t.Fatalf("the ring signal cannot interrupt a wait: %v", ringErr)
	}
	var sa kernelSigaction
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, ringSignal, 0, uintptr(unsafe.Pointer(&sa)), 8, 0, 0); e != 0 {
		t.Fatal(e)
	}
	if sa.flags&saRestart != 0 {
		t.Fatalf("the ring signal's handler restarts the wait (flags %#x)", sa.flags)
	}
	saved := ringTick
	ringTick = time.Hour
	defer func() { ringTick = saved }()

	forked := make(chan int, 4)
	proc, err := Launch([]string{"/bin/sh", "-c", "/bin/true; sleep 60; :"}, nil, nil, Hooks{
		Ready: func(int) error { return nil },
		Fork:  func(parent, child int, vfork bool) { forked <- child },
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	var children []int
	defer func() {
		for _, pid := range append(children, proc.PID) {
			unix.Kill(pid, unix.SIGKILL)
		}
	}()
	// The shell forks for /bin/true, then for sleep, which waits.
	for i := 0; i < 2; i++ {
		select {
		case pid := <-forked:
			children = append(children, pid)
		case <-time.After(10 * time.Second):
			t.Fatalf("fork %d of the shell not seen", i+1)
		}
	}
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- proc.Adopt(1, 2) }()
	select {
	case err := <-done:
		if err == nil || err.Error() != "process 1 is not traced" {
			t.Errorf("Adopt(1, 2) = %v, want process 1 is not traced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the adoption was not taken: the ring did not interrupt the wait")
	}
	go func() { done <- proc.Detach() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Detach: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the detach was not taken: the ring did not interrupt the wait")
	}
	<-proc.Done()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(proc.PID) + "/status")
	if err != nil {
		t.Fatalf("the shell is gone after the detach: %v", err)
	}
	if !strings.Contains(string(b), "\nTracerPid:\t0\n") {
		t.Errorf("the shell is still traced after the detach:\n%s", b)
	}
}

// TestWaitLoopForeignChild: a hook that starts a command on the tracer
// thread and never waits for it leaves a child there that is not traced;
// the loop, which sees it at every wait, goes on following the process to
// its end rather than hang or spin.
func TestWaitLoopForeignChild(t *testing.T) {
	if !ringReady() {
		t.Fatalf("the ring signal cannot interrupt a wait: %v", ringErr)
	}
	var started []*exec.Cmd
	proc, err := Launch([]string{"/bin/sh", "-c", "/bin/true; /bin/true; exit 7"}, nil, nil, Hooks{
		Ready: func(int) error { return nil },
		Fork: func(parent, child int, vfork bool) {
			if len(started) == 0 {
				cmd := exec.Command("/bin/true")
				if err := cmd.Start(); err != nil {
					t.Errorf("starting a command from the hook: %v", err)
					return
				}
				started = append(started, cmd)
			}
		},
	})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	defer func() {
		for _, c := range started {
			c.Wait()
		}
	}()
	select {
	case <-proc.Done():
	case <-time.After(20 * time.Second):
		unix.Kill(proc.PID, unix.SIGKILL)
		t.Fatal("the loop did not see the shell's end")
	}
	if st, err := proc.Wait(); err != nil || !st.Known || st.Code != 7 {
		t.Errorf("Wait = %+v, %v; want exit status 7", st, err)
	}
	if len(started) != 1 {
		t.Errorf("%d commands started from the hook, want 1", len(started))
	}
}
