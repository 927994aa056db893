//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// tree lists the files and folders under root, one line each: mode, path
// (and a link's target), in path order.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(&b, "%s %s", info.Mode(), rel)
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " -> %s", target)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestInstall: make install with DESTDIR and PREFIX puts each file in its
// place with its mode; the installed mdtrace finds the installed shim and
// mdreplay; a
// program built with pkg-config against the installed header and library
// gets an empty get_malloc_leak_info natively and its live blocks under
// the installed mdtrace; make uninstall leaves only the standard folders.
func TestInstall(t *testing.T) {
	needRoot(t)
	needCC(t)
	if _, err := exec.LookPath("pkg-config"); err != nil {
		t.Skip("pkg-config is not installed: cannot build a program as its users would")
	}
	dest := t.TempDir()
	fixture.Make(t, "install", "DESTDIR="+dest, "PREFIX=/usr")
	const installed = `drwxr-xr-x usr
drwxr-xr-x usr/bin
-rwxr-xr-x usr/bin/mdtrace
drwxr-xr-x usr/include
drwxr-xr-x usr/include/mdtrace
-rw-r--r-- usr/include/mdtrace/malloc_debug.h
drwxr-xr-x usr/lib
-rw-r--r-- usr/lib/libmdtrace.a
Lrwxrwxrwx usr/lib/libmdtrace.so -> libmdtrace.so.0
-rwxr-xr-x usr/lib/libmdtrace.so.0
drwxr-xr-x usr/lib/mdtrace
-rwxr-xr-x usr/lib/mdtrace/libmdshim.so
-rwxr-xr-x usr/lib/mdtrace/mdreplay
drwxr-xr-x usr/lib/pkgconfig
-rw-r--r-- usr/lib/pkgconfig/mdtrace.pc
drwxr-xr-x usr/share
drwxr-xr-x usr/share/man
drwxr-xr-x usr/share/man/man1
-rw-r--r-- usr/share/man/man1/mdtrace.1
`
	if got := tree(t, dest); got != installed {
		t.Fatalf("installed:\n%s\nwant:\n%s", got, installed)
	}
	for from, to := range map[string]string{
		"docs/mdtrace.1":                     "usr/share/man/man1/mdtrace.1",
		"lib/include/mdtrace/malloc_debug.h": "usr/include/mdtrace/malloc_debug.h",
		"bin/libmdshim.so":                   "usr/lib/mdtrace/libmdshim.so",
		"bin/mdreplay":                       "usr/lib/mdtrace/mdreplay",
	} {
		a, _ := os.ReadFile(filepath.Join(fixture.Root(), from))
		b, err := os.ReadFile(filepath.Join(dest, to))
		if err != nil || len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s is not %s (%v)", to, from, err)
		}
	}
	pc := readFile(t, filepath.Join(dest, "usr/lib/pkgconfig/mdtrace.pc"))
	for _, line := range []string{"prefix=/usr\n", "libdir=/usr/lib\n", "includedir=/usr/include\n", "Cflags: -I${includedir}\n", "Libs: -L${libdir} -lmdtrace\n"} {
		if !strings.Contains(pc, line) {
			t.Errorf("mdtrace.pc has no line %q:\n%s", line, pc)
		}
	}

	// A program built as its users build it, found by pkg-config in
	// DESTDIR, and run with DESTDIR's library.
	env := append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(dest, "usr/lib/pkgconfig"), "PKG_CONFIG_SYSROOT_DIR="+dest)
	cmd := exec.Command("pkg-config", "--cflags", "--libs", "mdtrace")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pkg-config: %v", err)
	}
	flags := strings.Fields(string(out))
	if want := fmt.Sprintf("-I%s/usr/include -L%s/usr/lib -lmdtrace", dest, dest); strings.Join(flags, " ") != want {
		t.Errorf("pkg-config --cflags --libs mdtrace: %q, want %q", out, want)
	}
	path := filepath.Join(t.TempDir(), "leakapi")
	buildLeakAPI(t, path, env, flags...)
	env = append(env, "LD_LIBRARY_PATH="+filepath.Join(dest, "usr/lib"))
	if got := runLeakAPI(t, path, env); got != leakAPIEmpty {
		t.Errorf("native:\n%s\nwant:\n%s", got, leakAPIEmpty)
	}
	mdtrace := exec.Command(filepath.Join(dest, "usr/bin/mdtrace"), "-o", "backtrace", "--", path)
	mdtrace.Env = env
	var stdout, stderr bytes.Buffer
	mdtrace.Stdout, mdtrace.Stderr = &stdout, &stderr
	if err := mdtrace.Run(); err != nil {
		t.Fatalf("the installed mdtrace: %v\n%s", err, stderr.String())
	}
	if stdout.String() != leakAPITracked {
		t.Errorf("under the installed mdtrace:\n%s\nwant:\n%s", stdout.String(), leakAPITracked)
	}
	if shim := " in " + filepath.Join(dest, "usr/lib/mdtrace/libmdshim.so") + "\n"; !strings.Contains(stderr.String(), shim) {
		t.Errorf("the installed mdtrace did not preload the installed shim:\n%s", stderr.String())
	}
	// The installed mdtrace replays with the installed mdreplay.
	records := filepath.Join(t.TempDir(), "records.txt")
	if err := os.WriteFile(records, []byte(replayOld), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(filepath.Join(dest, "usr/bin/mdtrace"), "replay", records).CombinedOutput()
	if want := "Replay of " + records + ": 2 threads,"; err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("the installed mdtrace replay: %v\n%s\nwant a start of %q", err, out, want)
	}

	fixture.Make(t, "uninstall", "DESTDIR="+dest, "PREFIX=/usr")
	const left = `drwxr-xr-x usr
drwxr-xr-x usr/bin
drwxr-xr-x usr/include
drwxr-xr-x usr/lib
drwxr-xr-x usr/lib/pkgconfig
drwxr-xr-x usr/share
drwxr-xr-x usr/share/man
drwxr-xr-x usr/share/man/man1
`
	if got := tree(t, dest); got != left {
		t.Errorf("after make uninstall:\n%s\nwant:\n%s", got, left)
	}
}

// TestNoShimFound: a copy of mdtrace with no shim next to it nor in
// ../lib/mdtrace says where it looked, and runs a command without the shim
// when the options do not need it.
func TestNoShimFound(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "mdtrace")
	if err := os.Mkdir(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(mdtraceBin, bin); err != nil {
		t.Fatal(err)
	}
	looked := fmt.Sprintf("no shim next to mdtrace or where make install puts it (%s/bin/libmdshim.so, %s/lib/mdtrace/libmdshim.so; give --shim PATH)", dir, dir)
	for _, tc := range []struct {
		opts   string
		code   int
		stderr string
	}{
		{"guard", 1, "mdtrace: " + looked + "\n"},
		{"leak_track", 0, "mdtrace: note: " + looked + "; probing the program's allocator instead\n"},
	} {
		cmd := exec.Command(bin, "-o", tc.opts, "--", "true")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.HasPrefix(stderr.String(), tc.stderr) {
			t.Errorf("-o %s: exit status %d, stderr:\n%s\nwant %d and a start of:\n%s", tc.opts, code, stderr.String(), tc.code, tc.stderr)
		}
	}
}
