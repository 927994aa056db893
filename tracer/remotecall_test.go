//go:build linux && amd64

package tracer

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/internal/fixture"
)

// TestRemoteCallLeft: a call that does not return in time (dlopen, waiting
// for the loader's lock that another thread holds) is left to return by
// itself: InjectLoad says so and lets the thread go, and once the lock is
// let go the thread comes back through the frame mdtrace wrote, to its
// pthread_join, its signal stack and mask as they were.
func TestRemoteCallLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_PTRACE) to call functions in a process")
	}
	shim := fixture.Shim(t)
	testProg(t, "libslowload.so")
	cmd := exec.Command(testProg(t, "slowload"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	if line, _ := out.ReadString('\n'); line != "loading\n" {
		t.Fatalf("slowload said %q, want loading", line)
	}
	defer func(d time.Duration) { injectCallWait = d }(injectCallWait)
	injectCallWait = 300 * time.Millisecond
	_, err = InjectLoad(cmd.Process.Pid, shim, true, 16, 0, nil)
	if !errors.Is(err, errCallLeft) || !strings.Contains(err.Error(), "calling dlopen in thread ") {
		t.Fatalf("InjectLoad: %v; want a dlopen left to return by itself", err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil || !strings.Contains(string(status), "\nTracerPid:\t0\n") {
		t.Errorf("slowload's status once InjectLoad returned (%v):\n%s\nwant TracerPid 0", err, status)
	}
	fmt.Fprintln(stdin, "go")
	if line, _ := out.ReadString('\n'); line != "joined altstack ok mask ok\n" {
		t.Fatalf("slowload said %q, want %q", line, "joined altstack ok mask ok\n")
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("slowload: %v", err)
	}
}
