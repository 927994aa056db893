//go:build linux

package e2e

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mdtrace/mdtrace/internal/fixture"
)

// leakAPIEmpty is what testdata/leakapi prints when nothing tracks its
// allocations, and leakAPITracked what it prints under mdtrace with the
// backtrace option: its three call sites, by size.
const (
	leakAPIEmpty   = "overall_size=0 info_size=0 total_memory=0 backtrace_size=0 entries=0 info=NULL\n"
	leakAPITracked = "overall_size=432 info_size=144 total_memory=9500 backtrace_size=16 entries=3\n" +
		"size=9000 num=1 first_frame=alloc_large\nsize=200 num=1 first_frame=alloc_medium\nsize=100 num=3 first_frame=alloc_small\n"
)

// needCC skips a test that builds a C program when there is no compiler.
func needCC(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc) to build a program against libmdtrace")
	}
}

// buildLeakAPI compiles testdata/leakapi.c into dir with extra flags, as
// a program is built that calls get_malloc_leak_info.
func buildLeakAPI(t *testing.T, out string, env []string, flags ...string) {
	t.Helper()
	args := append([]string{"-O0", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-rdynamic", "-Wall", "-Werror",
		"-o", out, filepath.Join(testdataDir, "leakapi.c")}, flags...)
	cc := exec.Command("cc", args...)
	cc.Env = env
	if b, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("cc %v: %v\n%s", args, err, b)
	}
}

// runLeakAPI runs a build of leakapi natively and returns its output.
func runLeakAPI(t *testing.T, path string, env []string) string {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(out)
}

// TestLeakInfoLibrary: a program that includes <mdtrace/malloc_debug.h>
// and links libmdtrace, shared or static, gets an empty result natively
// and with --no-preload, and its live allocations under mdtrace. The
// static build defines get_malloc_leak_info itself, ahead of the shim's:
// it reaches the shim by the names the shim also exports the calls by.
func TestLeakInfoLibrary(t *testing.T) {
	needRoot(t)
	needCC(t)
	lib := fixture.Library(t)
	inc := filepath.Join(fixture.Root(), "lib", "include")
	dir := t.TempDir()
	builds := map[string][]string{
		"shared": {"-I" + inc, "-L" + lib, "-lmdtrace", "-Wl,-rpath," + lib},
		"static": {"-I" + inc, filepath.Join(lib, "libmdtrace.a")},
	}
	for name, flags := range builds {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			buildLeakAPI(t, path, nil, flags...)
			if got := runLeakAPI(t, path, nil); got != leakAPIEmpty {
				t.Errorf("native:\n%s\nwant:\n%s", got, leakAPIEmpty)
			}
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"-o", "backtrace"}, leakAPITracked},
				{[]string{"-o", "backtrace", "--no-preload"}, leakAPIEmpty},
			} {
				args := append(tc.args, "--log", filepath.Join(dir, name+".log"), "--", path)
				r := runMdtrace(t, args...)
				if r.code != 0 || r.stdout != tc.want {
					t.Errorf("mdtrace %v: exit status %d, output:\n%s\nwant:\n%s\nstderr:\n%s", args, r.code, r.stdout, tc.want, r.stderr)
				}
			}
		})
	}
}
