package session

import (
	"os"
	"strconv"
	"syscall"
	"testing"
)

// TestCgroupPaths names cgroups by their ids (their directories' inodes in
// the cgroup v2 hierarchy) as /proc/PID/cgroup names them: this process's,
// and one made for the test.
func TestCgroupPaths(t *testing.T) {
	root := cgroup2Mount()
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	ino := func(path string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(root+path, &st); err != nil {
			t.Skipf("%s%s: %v (another cgroup namespace?)", root, path, err)
		}
		return st.Ino
	}
	own := readCgroup(os.Getpid())
	made := "/mdtrace-test-" + strconv.Itoa(os.Getpid())
	if err := os.Mkdir(root+made, 0o755); err != nil {
		t.Skipf("making a cgroup: %v", err)
	}
	defer os.Remove(root + made)
	var c cgroupPaths
	for _, want := range []string{own, made} {
		if got := c.path(ino(want)); got != want {
			t.Errorf("cgroup %d is %q, want %q", ino(want), got, want)
		}
	}
	if got := c.path(0); got != "" {
		t.Errorf("cgroup 0 is %q, want none", got)
	}
}
