//go:build linux

package tracer

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Errors for targets mdtrace cannot trace.
var (
	// ErrProcessGone means the process exited before or while mdtrace attached.
	ErrProcessGone = errors.New("the process exited")
	// ErrNot64Bit means the target is not a 64-bit x86-64 program.
	ErrNot64Bit = errors.New("not a 64-bit x86-64 program")
	// ErrNoMalloc means no file of the target defines malloc.
	ErrNoMalloc = errors.New("no malloc to trace")
)

// CheckExecutable verifies that path is an ELF program mdtrace can trace.
func CheckExecutable(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		bits := "32-bit"
		if f.Class == elf.ELFCLASS64 {
			bits = f.Machine.String()
		}
		return fmt.Errorf("%s is a %s program; mdtrace traces 64-bit x86-64 programs: %w", path, bits, ErrNot64Bit)
	}
	return nil
}

// definesMalloc reports whether the ELF file at path defines malloc.
//
// Only the dynamic symbols matter to a program that links dynamically (they
// are what the loader binds malloc to); a static program has none, and its
// own symbol table says. Reading just those keeps attaching to a process
// with hundreds of libraries quick.
func definesMalloc(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil || len(syms) == 0 {
		syms, _ = f.Symbols()
	}
	for _, s := range syms {
		if name, ok := definedFunc(s); ok && name == "malloc" {
			return true
		}
	}
	return false
}

// isLoader reports whether path is a dynamic loader, whose own minimal
// malloc serves only the loader.
func isLoader(path string) bool {
	return strings.HasPrefix(filepath.Base(path), "ld-linux") || strings.HasPrefix(filepath.Base(path), "ld64.so")
}

// pickAllocator returns the first file that defines malloc among exe and
// then libs, in the dynamic linker's search order: the executable, the
// preloaded libraries, then the rest.
//
// The path is resolved through symbolic links, so that one file has one
// name whichever way it was reached (/lib or /usr/lib).
func pickAllocator(exe string, libs []string) (string, error) {
	if definesMalloc(exe) {
		return canonical(exe), nil
	}
	for _, l := range libs {
		if isLoader(l) {
			continue
		}
		if definesMalloc(l) {
			return canonical(l), nil
		}
	}
	return "", fmt.Errorf("%s: neither it nor its libraries define malloc: %w", exe, ErrNoMalloc)
}

// canonical resolves the symbolic links of path, or returns it as it is.
func canonical(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// AllocatorOfRunning finds the file that provides malloc to a running
// process, from its executable and the libraries it has mapped, preloaded
// ones (LD_PRELOAD in its environment) first.
func AllocatorOfRunning(pid int) (string, error) {
	exe, err := procExe(pid)
	if err != nil {
		return "", err
	}
	if err := CheckExecutable(exe); err != nil {
		return "", err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return "", procErr(pid, err)
	}
	var libs []string
	seen := map[string]bool{exe: true}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		path := strings.Join(f[5:], " ")
		if !seen[path] {
			seen[path] = true
			libs = append(libs, path)
		}
	}
	// Preloaded libraries come before the others in the search order.
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	pre := preloads(env)
	sortPreloadedFirst(libs, pre)
	return pickAllocator(exe, libs)
}

// preloads returns the base names of the libraries in LD_PRELOAD of a
// NUL-separated environment.
func preloads(environ []byte) map[string]bool {
	out := map[string]bool{}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte("LD_PRELOAD="))
		if !ok {
			continue
		}
		for _, p := range strings.FieldsFunc(string(v), func(r rune) bool { return r == ' ' || r == ':' }) {
			out[filepath.Base(p)] = true
		}
	}
	return out
}

// PreloadEnv returns the environment env with lib first in LD_PRELOAD and
// each "KEY=value" of set in place of any KEY it had.
func PreloadEnv(env []string, lib string, set ...string) []string {
	var out []string
	preload := lib
	for _, kv := range env {
		key, val, _ := strings.Cut(kv, "=")
		switch {
		case key == "LD_PRELOAD":
			if val != "" {
				preload += ":" + val
			}
		case slices.ContainsFunc(set, func(s string) bool { return strings.HasPrefix(s, key+"=") }):
		default:
			out = append(out, kv)
		}
	}
	return append(append(out, "LD_PRELOAD="+preload), set...)
}

func sortPreloadedFirst(libs []string, pre map[string]bool) {
	var a, b []string
	for _, l := range libs {
		if pre[filepath.Base(l)] {
			a = append(a, l)
		} else {
			b = append(b, l)
		}
	}
	copy(libs, append(a, b...))
}

// AllocatorOfExec finds the file that will provide malloc to a program
// that has just been executed and whose libraries are not mapped yet. It
// asks the program's own dynamic loader for the libraries it will load
// (`LOADER --list`), with the program's environment, so that LD_PRELOAD,
// LD_LIBRARY_PATH, RUNPATH and the loader cache are honoured exactly.
//
// The answer is remembered: a build runs the same few programs thousands of
// times, and each run of the loader costs milliseconds while the process
// waits. It is used again for the same executable and loader (the same
// files, unchanged), the same loader variables in the environment and the
// same loader cache, while none of the files the loader listed has changed.
func AllocatorOfExec(pid int) (string, error) {
	lib, _, err := AllocatorAndRuntimeOfExec(pid)
	return lib, err
}

// AllocatorAndRuntimeOfExec is AllocatorOfExec, and also returns the C++
// runtime library the program will load ("" if none): see IsCxxRuntime.
func AllocatorAndRuntimeOfExec(pid int) (lib, runtime string, err error) {
	exe, err := procExe(pid)
	if err != nil {
		return "", "", err
	}
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	key, keyed := execKey(pid, exe, env)
	if keyed {
		if lib, runtime, ok := execCache.get(key); ok {
			return lib, runtime, nil
		}
	}
	if err := CheckExecutable(exe); err != nil {
		return "", "", err
	}
	interp, err := LoaderOf(pid)
	if err != nil {
		return "", "", err
	}
	var libs []string
	if interp != "" {
		if libs, err = loaderList(interp, exe, env, procCwd(pid)); err != nil {
			return "", "", err
		}
	}
	// A static program (no loader) carries its own allocator.
	lib, err = pickAllocator(exe, libs)
	if err != nil {
		return "", "", err
	}
	if i := slices.IndexFunc(libs, IsCxxRuntime); i >= 0 {
		runtime = canonical(libs[i])
	}
	if keyed {
		execCache.put(key, interp, libs, lib, runtime)
	}
	return lib, runtime, nil
}

// AllocatorOfFile finds the file that would provide malloc to the program
// at path, run with the environment env ("KEY=value" strings), the way
// AllocatorOfExec does for a program already executed.
func AllocatorOfFile(path string, env []string) (string, error) {
	if err := CheckExecutable(path); err != nil {
		return "", err
	}
	interp, err := interpreter(path, path)
	if err != nil {
		return "", err
	}
	if interp == "" {
		return pickAllocator(path, nil)
	}
	libs, err := loaderList(interp, path, []byte(strings.Join(env, "\x00")), "")
	if err != nil {
		return "", err
	}
	return pickAllocator(path, libs)
}

// loaderList runs the dynamic loader in list mode and returns the paths of
// the libraries it would load, in load order. dir, if not "", is the
// directory it runs in: the program's, against which relative paths in
// LD_LIBRARY_PATH and LD_PRELOAD resolve.
func loaderList(interp, exe string, environ []byte, dir string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, interp, "--list", exe)
	cmd.Dir = dir
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if len(kv) > 0 {
			cmd.Env = append(cmd.Env, string(kv))
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("listing the libraries of %s with %s: %v: %s", exe, interp, err, strings.TrimSpace(errb.String()))
	}
	return parseLoaderList(out.Bytes()), nil
}

// parseLoaderList parses the loader's list output: "name => path (addr)",
// "path (addr)" or "name (addr)" (the vdso) per line.
func parseLoaderList(out []byte) []string {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.LastIndex(line, " ("); i >= 0 {
			line = line[:i]
		}
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		if strings.HasPrefix(line, "/") {
			libs = append(libs, line)
		}
	}
	return libs
}

// procExe returns the path of the executable of a process.
func procExe(pid int) (string, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", procErr(pid, err)
	}
	return strings.TrimSuffix(exe, " (deleted)"), nil
}

// ProgName returns a process's argv[0], as Android's getprogname() does.
func ProgName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		if exe, err := procExe(pid); err == nil {
			return exe
		}
		return strconv.Itoa(pid)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// procErr turns an error reading /proc/PID into ErrProcessGone when the
// process does not exist.
func procErr(pid int, err error) error {
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
		return fmt.Errorf("process %d: %w", pid, ErrProcessGone)
	}
	return fmt.Errorf("process %d: %w", pid, err)
}

// FuncOffset returns the file offset of a function of an ELF file, as
// uprobes take it.
func FuncOffset(path, symbol string) (uint64, error) {
	fs, err := funcNamed(path, symbol)
	return fs.off, err
}

// loadedLibraries returns the libraries the loader listed for the program
// process pid executes, as AllocatorOfExec found them (nil if it has not),
// spelled as the loader names them.
func loadedLibraries(pid int, exe string) []string {
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	key, keyed := execKey(pid, exe, env)
	if !keyed {
		return nil
	}
	return execCache.files(key)
}
