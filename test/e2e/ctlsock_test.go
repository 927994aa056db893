//go:build linux

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// connectAs connects to the unix socket at path as uid (gid the same, no
// other groups), through Debian's python3, and returns "ok" or the name of
// the errno.
func connectAs(t *testing.T, uid int, path string) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to connect as another user")
	}
	cmd := exec.Command("/usr/bin/python3", "-c", `
import errno, socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
`, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 as uid %d: %v\n%s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// ctlPath is the control socket's path in the environment of process pid.
func ctlPath(t *testing.T, pid string) string {
	t.Helper()
	for _, kv := range strings.Split(readFile(t, "/proc/"+pid+"/environ"), "\x00") {
		if v, ok := strings.CutPrefix(kv, "MDSHIM_CTL="); ok {
			return v
		}
	}
	t.Fatalf("process %s has no MDSHIM_CTL", pid)
	return ""
}

var ctlPathRE = regexp.MustCompile(`^/(run|tmp)/mdtrace-ctl-[0-9]+-[0-9]+-[0-9]+/socket$`)

// TestCtlSocket: the shim's control socket is a socket file in a private
// directory: another user (nobody) cannot connect to it while the traced
// process can (get_malloc_leak_info answers); it is gone when mdtrace
// exits; the one of an mdtrace killed by SIGKILL is removed by the next
// mdtrace.
func TestCtlSocket(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := start(t, mdtraceBin, "-o", "backtrace", "--log", dir+"/log", "--ready-file", dir+"/ready", "--", prog("attachee"))
	m.expectLine(t, "ready")
	waitFile(t, dir+"/ready")
	pid := strings.TrimSpace(readFile(t, dir+"/ready"))
	path := ctlPath(t, pid)
	if !ctlPathRE.MatchString(path) {
		t.Fatalf("MDSHIM_CTL=%s", path)
	}
	if got := connectAs(t, 65534, path); got != "EACCES" {
		t.Errorf("nobody connecting to %s: %s, want EACCES", path, got)
	}
	// SIGKILL: mdtrace cannot remove its directory.
	m.cmd.Process.Kill()
	m.wait(t)
	if n, err := strconv.Atoi(pid); err == nil {
		syscall.Kill(n, syscall.SIGKILL)
	}
	stale := filepath.Dir(path)
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("the killed mdtrace's directory: %v", err)
	}

	// The next mdtrace removes it, serves its own process, and removes its
	// own directory when it exits.
	r := runMdtrace(t, "-o", "backtrace", "--log", dir+"/log2", "--", "sh", "-c", `echo "$MDSHIM_CTL"; exec "$0"`, prog("leakinfo"))
	own, out, _ := strings.Cut(r.stdout, "\n")
	want := "overall_size=432 info_size=144 total_memory=9500 backtrace_size=16 entries=3\n" +
		"size=9000 num=1 first_frame=alloc_large\nsize=200 num=1 first_frame=alloc_medium\nsize=100 num=3 first_frame=alloc_small\nnull_check=ok\n"
	if r.code != 0 || out != want || !ctlPathRE.MatchString(own) {
		t.Errorf("exit status %d, output:\n%s\nwant MDSHIM_CTL and:\n%s\nstderr:\n%s", r.code, r.stdout, want, r.stderr)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed mdtrace's directory %s after the next mdtrace: %v", stale, err)
	}
	if _, err := os.Lstat(filepath.Dir(own)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after mdtrace exited: %v", filepath.Dir(own), err)
	}
}
