//go:build linux

package stacks

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/internal/fixture"
)

// TestLiveTask: a process whose main thread has ended shows no maps and
// no root under /proc/PID; LiveTask finds its other thread, through which
// ReadMaps, ProcRoot and MappedFile reach them. A process with its main
// thread has none.
func TestLiveTask(t *testing.T) {
	if LiveTask(os.Getpid()) != "" {
		t.Errorf("LiveTask of a process with its main thread: %q, want none", LiveTask(os.Getpid()))
	}
	cmd := exec.Command(fixture.Program(t, "leaderexit"), "hold")
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
	defer func() {
		stdin.Close()
		io.Copy(io.Discard, stdout)
		cmd.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "leader gone\n" {
		t.Fatalf("leaderexit said %q (%v)", line, err)
	}
	pid := cmd.Process.Pid
	// pthread_join returns as the main thread ends; the kernel lets its
	// memory go a moment later.
	for i := 0; ; i++ {
		if raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); len(raw) == 0 {
			break
		}
		if i == 100 {
			t.Fatal("/proc/PID/maps still shows the maps")
		}
		time.Sleep(10 * time.Millisecond)
	}
	dir := LiveTask(pid)
	if !strings.HasPrefix(dir, fmt.Sprintf("/proc/%d/task/", pid)) || dir == fmt.Sprintf("/proc/%d/task/%d", pid, pid) {
		t.Fatalf("LiveTask(%d) = %q, want its other thread's directory", pid, dir)
	}
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	var exe *Mapping
	for i := range maps.Mappings {
		if maps.Mappings[i].Path == fixture.Program(t, "leaderexit") {
			exe = &maps.Mappings[i]
			break
		}
	}
	if exe == nil {
		t.Fatalf("no mapping of the program in:\n%s", maps.Raw)
	}
	if f := MappedFile(pid, exe); f.Path != exe.Path {
		t.Errorf("MappedFile opens %q, want the program's path (threads have no map_files)", f.Path)
	}
	if root, err := ProcRoot(pid); err != nil || root != "" {
		t.Errorf("ProcRoot = %q, %v; want mdtrace's own root", root, err)
	}
}
