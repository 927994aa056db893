//go:build linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// testUser is an unprivileged user to run commands as: nobody, or a
// system user the test creates (and removes) where there is none.
func testUser(t *testing.T) *user.User {
	t.Helper()
	if u, err := user.Lookup("nobody"); err == nil {
		return u
	}
	const name = "mdtrace-test"
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("no user nobody, and useradd %s failed: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestUser: -u USER runs the command with the user's uid, gid, groups and
// HOME, USER and LOGNAME; what it creates belongs to the user; the shim is
// preloaded and reaches mdtrace's control socket, and the leak report is
// the one the command gets as root.
func TestUser(t *testing.T) {
	needRoot(t)
	u := testUser(t)
	groups, err := u.GroupIds()
	if err != nil {
		t.Fatal(err)
	}
	// A folder the user can enter (t.TempDir's parent is private).
	dir, err := os.MkdirTemp("", "mdtrace-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The user writes its file in a folder of its own.
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	var uid, gid int
	fmt.Sscan(u.Uid, &uid)
	fmt.Sscan(u.Gid, &gid)
	if err := os.Chown(out, uid, gid); err != nil {
		t.Fatal(err)
	}

	t.Run("identity", func(t *testing.T) {
		file := filepath.Join(out, "made")
		r := runMdtrace(t, "-u", u.Username, "-o", "leak_track", "--log", filepath.Join(dir, "log1"), "--",
			"sh", "-c", `id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"; touch `+file)
		want := fmt.Sprintf("%s\n%s\n%s\n%s %s %s\n", u.Uid, u.Gid, strings.Join(groups, " "), u.HomeDir, u.Username, u.Username)
		if r.code != 0 || r.stdout != want {
			t.Errorf("exit status %d, output:\n%s\nwant:\n%s\nstderr:\n%s", r.code, r.stdout, want, r.stderr)
		}
		st, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != uid || int(sys.Gid) != gid {
			t.Errorf("%s belongs to %d:%d, want %d:%d", file, sys.Uid, sys.Gid, uid, gid)
		}
	})

	t.Run("leaks", func(t *testing.T) {
		logPath := filepath.Join(dir, "log2")
		r := runMdtrace(t, "--user", u.Username, "-o", "backtrace leak_track", "--log", logPath, "--", prog("leaky"), "3")
		if r.code != 3 || r.stdout != "leaky: done\n" {
			t.Fatalf("exit status %d, output %q; stderr:\n%s", r.code, r.stdout, r.stderr)
		}
		if probe := launchModes[0].probe; !strings.Contains(r.stderr, probe) {
			t.Errorf("the shim was not preloaded: stderr lacks %q:\n%s", probe, r.stderr)
		}
		golden(t, "leaky_leak_report.txt", normalizeLeakReport(t, logMessages(t, readFile(t, logPath), ""), prog("leaky")))
	})

	// get_malloc_leak_info reaches mdtrace over the control socket, which
	// serves the processes it traces whoever runs them.
	t.Run("leak info", func(t *testing.T) {
		r := runMdtrace(t, "-u", u.Username, "-o", "backtrace", "--log", filepath.Join(dir, "log3"), "--", prog("leakinfo"))
		want := "overall_size=432 info_size=144 total_memory=9500 backtrace_size=16 entries=3\n" +
			"size=9000 num=1 first_frame=alloc_large\nsize=200 num=1 first_frame=alloc_medium\nsize=100 num=3 first_frame=alloc_small\nnull_check=ok\n"
		if r.code != 0 || r.stdout != want {
			t.Errorf("exit status %d, output:\n%s\nwant:\n%s\nstderr:\n%s", r.code, r.stdout, want, r.stderr)
		}
	})

	// A shim the user cannot read is not preloaded: an error when the
	// options need it, a note otherwise.
	t.Run("shim closed to the user", func(t *testing.T) {
		private := filepath.Join(dir, "private")
		if err := os.Mkdir(private, 0o700); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(private, "mdtrace")
		if err := copyFile(mdtraceBin, bin); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(shimBin(), filepath.Join(private, "libmdshim.so")); err != nil {
			t.Fatal(err)
		}
		why := fmt.Sprintf("the shim cannot be preloaded: user %s cannot enter %s, on the way to %s/libmdshim.so (make install puts it where every user can read it; or give --shim a copy %s can read)", u.Username, private, private, u.Username)
		for _, tc := range []struct {
			opts, stderr string
			code         int
		}{
			{"guard", "mdtrace: " + why + "\n", 1},
			{"leak_track", "mdtrace: note: " + why + "; probing the program's allocator instead\n", 0},
		} {
			cmd := exec.Command(bin, "-u", u.Username, "-o", tc.opts, "--log", filepath.Join(dir, "log4"), "--", "true")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.HasPrefix(stderr.String(), tc.stderr) {
				t.Errorf("-o %s: exit status %d, stderr:\n%s\nwant %d and a start of:\n%s", tc.opts, code, stderr.String(), tc.code, tc.stderr)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args   []string
			code   int
			stderr string
		}{
			{[]string{"-u", "mdtrace-no-such-user", "--", "true"}, 1, "mdtrace: --user mdtrace-no-such-user: no such user in /etc/passwd\n"},
			{[]string{"-u", u.Username, "-p", "1"}, 2, "mdtrace: --user runs a command mdtrace launches as USER: not with -p, --program or --all\nRun 'mdtrace --help' for usage.\n"},
			{[]string{"--user=", "--", "true"}, 2, "mdtrace: --user needs a user name\nRun 'mdtrace --help' for usage.\n"},
		} {
			r := runMdtrace(t, tc.args...)
			if r.code != tc.code || r.stderr != tc.stderr {
				t.Errorf("%v: exit status %d, stderr:\n%s\nwant %d:\n%s", tc.args, r.code, r.stderr, tc.code, tc.stderr)
			}
		}
	})
}
