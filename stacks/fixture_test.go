package stacks

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fixtures are the C programs of testdata/ built for one test.
type fixtures struct {
	dir   string
	lib   string // libfixlib.so
	pie   string // fixture built -fPIE -pie
	nopie string // fixture built -fno-pie -no-pie
}

// buildFixtures compiles testdata/fixlib.c and testdata/fixture.c with gcc
// into a temporary directory. It skips the test if gcc is not installed.
func buildFixtures(tb testing.TB) *fixtures {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		tb.Skip("gcc is not installed; the ELF fixtures are C programs compiled at test time")
	}
	dir, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	src, err := filepath.Abs("testdata")
	if err != nil {
		tb.Fatal(err)
	}
	fx := &fixtures{
		dir:   dir,
		lib:   filepath.Join(dir, "libfixlib.so"),
		pie:   filepath.Join(dir, "pie"),
		nopie: filepath.Join(dir, "nopie"),
	}
	gcc(tb, "-O0", "-shared", "-fPIC", "-o", fx.lib, filepath.Join(src, "fixlib.c"))
	link := []string{"-L" + dir, "-lfixlib", "-Wl,-rpath," + dir}
	gcc(tb, append([]string{"-O0", "-rdynamic", "-fPIE", "-pie", "-o", fx.pie, filepath.Join(src, "fixture.c")}, link...)...)
	gcc(tb, append([]string{"-O0", "-rdynamic", "-fno-pie", "-no-pie", "-o", fx.nopie, filepath.Join(src, "fixture.c")}, link...)...)
	return fx
}

// gcc runs gcc with args and fails the test if it fails.
func gcc(tb testing.TB, args ...string) {
	tb.Helper()
	out, err := exec.Command("gcc", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// copyFile copies src to dst, keeping it executable.
func copyFile(tb testing.TB, src, dst string) {
	tb.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		tb.Fatal(err)
	}
}

// startFixture runs a fixture program and returns its pid and the
// addresses it printed, by function name. The program runs until the test
// ends.
func startFixture(tb testing.TB, path string) (int, map[string]uint64) {
	tb.Helper()
	cmd := exec.Command(path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			tb.Errorf("%s: %v", path, err)
		}
	})

	type result struct {
		addrs map[string]uint64
		err   error
	}
	done := make(chan result, 1)
	go func() {
		addrs := map[string]uint64{}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			name, value, _ := strings.Cut(sc.Text(), " ")
			switch {
			case name == "ready":
				done <- result{addrs: addrs}
				_, _ = io.Copy(io.Discard, stdout)
				return
			case strings.HasPrefix(value, "0x"):
				a, err := strconv.ParseUint(value[2:], 16, 64)
				if err != nil {
					done <- result{err: fmt.Errorf("line %q: %v", sc.Text(), err)}
					return
				}
				addrs[name] = a
			}
		}
		done <- result{err: fmt.Errorf("no \"ready\" line (%v)", sc.Err())}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			tb.Fatalf("%s: %v", path, r.err)
		}
		return cmd.Process.Pid, r.addrs
	case <-time.After(30 * time.Second):
		tb.Fatalf("%s did not print \"ready\" within 30s", path)
	}
	return 0, nil
}

// elfSymbol returns the symbol called name in the .symtab (or, failing
// that, the .dynsym) of the ELF file at path, read with debug/elf.
func elfSymbol(tb testing.TB, path, name string) elf.Symbol {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := read()
		for _, s := range syms {
			if s.Name == name && s.Section != elf.SHN_UNDEF {
				return s
			}
		}
	}
	tb.Fatalf("%s has no symbol %s", path, name)
	return elf.Symbol{}
}

// elfBuildID returns the build-id of the ELF file at path from its
// .note.gnu.build-id section, read with debug/elf.
func elfBuildID(tb testing.TB, path string) string {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		tb.Fatalf("%s has no .note.gnu.build-id", path)
	}
	data, err := s.Data()
	if err != nil || len(data) < 16 {
		tb.Fatalf("%s: reading .note.gnu.build-id: %v", path, err)
	}
	return fmt.Sprintf("%x", data[16:])
}

// execLoadBias returns p_vaddr - p_offset of the first executable PT_LOAD
// of the ELF file at path: the load bias Android adds to a map-relative pc.
func execLoadBias(tb testing.TB, path string) uint64 {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.Vaddr - p.Off
		}
	}
	tb.Fatalf("%s has no executable PT_LOAD", path)
	return 0
}
