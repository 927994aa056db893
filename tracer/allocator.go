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
	"sync"
	"syscall"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
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
	return checkExecutable(stacks.LocalFile(path))
}

// checkExecutable verifies that f is an ELF program mdtrace can trace.
func checkExecutable(f stacks.File) error {
	_, _, err := fromFile(checkedCache, f.Path, byID, func() (struct{}, error) { return struct{}{}, readExecutable(f) })
	return err
}

// checkedCache remembers the files checkExecutable passed, and
// mallocCache definesMalloc's answers, by file: --all --inject asks of
// every process it takes, a build's runs of one compiler each time.
var (
	checkedCache = newMemo[fileID, struct{}](1024)
	mallocCache  = newMemo[fileID, bool](1024)
)

func readExecutable(f stacks.File) error {
	ef, err := elf.Open(f.Path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", f.Name, err)
	}
	defer ef.Close()
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		bits := "32-bit"
		if ef.Class == elf.ELFCLASS64 {
			bits = ef.Machine.String()
		}
		return fmt.Errorf("%s is a %s program; mdtrace traces 64-bit x86-64 programs: %w", f.Name, bits, ErrNot64Bit)
	}
	return nil
}

// definesMalloc reports whether the ELF file f defines malloc.
//
// Only the dynamic symbols matter to a program that links dynamically (they
// are what the loader binds malloc to); a static program has none, and its
// own symbol table says. Looking malloc up in the dynamic symbols' hash
// table keeps attaching to a process with hundreds of libraries, or to a
// program that exports tens of thousands of symbols, quick. A file that cannot be read is an
// error: the allocator found past it could be the wrong one.
func definesMalloc(f stacks.File) (bool, error) {
	if f.Path == "" {
		return false, fmt.Errorf("%s is in the loader's list of libraries, but no file the process maps is it: cannot tell whether it defines malloc", f.Name)
	}
	ok, _, err := fromFile(mallocCache, f.Path, byID, func() (bool, error) { return readDefinesMalloc(f) })
	return ok, err
}

func readDefinesMalloc(f stacks.File) (bool, error) {
	ef, err := elf.Open(f.Path)
	if err != nil {
		return false, fmt.Errorf("reading %s to find its malloc: %w", f.Name, err)
	}
	defer ef.Close()
	// A static program's dynamic symbols are none, or the null one.
	var syms []elf.Symbol
	ds := ef.Section(".dynsym")
	dynamic := ds != nil && ds.Size > 24
	if dynamic {
		syms, err = dynamicSymbols(ef, "malloc")
	}
	if !dynamic || err != nil {
		syms, _ = ef.Symbols()
	}
	for _, s := range syms {
		if name, ok := definedFunc(s); ok && name == "malloc" {
			return true, nil
		}
	}
	return false, nil
}

// isLoader reports whether path is a dynamic loader, whose own minimal
// malloc serves only the loader.
func isLoader(path string) bool {
	return strings.HasPrefix(filepath.Base(path), "ld-linux") || strings.HasPrefix(filepath.Base(path), "ld64.so")
}

// pickAllocator returns the first file that defines malloc among exe and
// then libs, in the dynamic linker's search order: the executable, the
// preloaded libraries, then the rest in the order the loader loaded them.
// An executable that defines malloc (an allocator linked in statically)
// serves every library's calls too.
func pickAllocator(exe stacks.File, libs []stacks.File) (stacks.File, error) {
	if ok, err := definesMalloc(exe); ok || err != nil {
		return exe, err
	}
	for _, l := range libs {
		if isLoader(l.Name) {
			continue
		}
		if ok, err := definesMalloc(l); ok || err != nil {
			return l, err
		}
	}
	return stacks.File{}, fmt.Errorf("%s: neither it nor its libraries define malloc: %w", exe.Name, ErrNoMalloc)
}

// canonical resolves the symbolic links of path, or returns it as it is.
func canonical(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// exeFile returns the executable of process pid, opened through
// /proc/PID/exe: the file the process runs, even deleted or in another
// mount namespace.
func exeFile(pid int) (stacks.File, error) {
	exe, err := procExe(pid)
	if err != nil {
		return stacks.File{}, err
	}
	f := stacks.File{Name: exe, Path: fmt.Sprintf("/proc/%d/exe", pid)}
	if err := checkExecutable(f); err != nil {
		if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); serr != nil {
			return stacks.File{}, procErr(pid, serr)
		}
		return stacks.File{}, err
	}
	return f, nil
}

// AllocatorOfRunning finds the file that provides malloc to a running
// process the way its dynamic loader bound it: the executable, then the
// objects of the loader's list of libraries (read from the process's
// memory) in its order, which is the order the loader looks symbols up in:
// the preloaded libraries (LD_PRELOAD, /etc/ld.so.preload), then the
// libraries needed, breadth first. Each file is the one mapped, opened
// through /proc/PID/map_files. A process whose loader has not run yet gets
// the loader's answer for its program (AllocatorOfExec).
func AllocatorOfRunning(pid int) (stacks.File, error) {
	exe, err := exeFile(pid)
	if err != nil {
		return stacks.File{}, err
	}
	loader, err := LoaderOf(pid)
	if err != nil {
		return stacks.File{}, err
	}
	if loader.Name == "" {
		// A static program carries its own allocator.
		return pickAllocator(exe, nil)
	}
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return stacks.File{}, procErr(pid, err)
	}
	libs, err := linkedFiles(pid, loader, maps)
	if errors.Is(err, errNoLinkMap) {
		return AllocatorOfExec(pid)
	}
	if err != nil {
		return stacks.File{}, err
	}
	return pickAllocator(exe, libs)
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
func AllocatorOfExec(pid int) (stacks.File, error) {
	lib, _, err := AllocatorAndRuntimeOfExec(pid)
	return lib, err
}

// AllocatorAndRuntimeOfExec is AllocatorOfExec, and also returns the C++
// runtime library the program will load (a zero File if none): see
// IsCxxRuntime.
//
// A process in another root or mount namespace (a container) gets its
// loader run in its root (chroot to /proc/PID/root), so that the
// container's own libraries, loader cache and paths decide; the files the
// loader lists are then opened in that root.
func AllocatorAndRuntimeOfExec(pid int) (lib, runtime stacks.File, err error) {
	exe, err := procExe(pid)
	if err != nil {
		return lib, runtime, err
	}
	root, err := stacks.ProcRoot(pid)
	if err != nil {
		return lib, runtime, procErr(pid, err)
	}
	env := procEnviron(pid)
	// Another root's files are not the ones the cache would check.
	key, keyed := execKey(pid, exe, env)
	keyed = keyed && root == ""
	if keyed {
		if lib, runtime, ok := execCache.get(key); ok {
			return stacks.LocalFile(lib), fileOrNone(runtime), nil
		}
	}
	exeF, err := exeFile(pid)
	if err != nil {
		return lib, runtime, err
	}
	interp, err := LoaderOf(pid)
	if err != nil {
		return lib, runtime, err
	}
	var (
		names []string
		libs  []stacks.File
	)
	if interp.Name != "" {
		if names, err = loaderList(interp.Name, exe, env, procCwd(pid), root); err != nil {
			return lib, runtime, err
		}
		var listed []stacks.File
		for _, n := range names {
			f := stacks.LocalFile(canonical(n))
			if root != "" {
				if f, err = stacks.ResolveFile(pid, n); err != nil {
					return lib, runtime, err
				}
				listed = append(listed, stacks.File{Name: n, Path: f.Path})
			}
			libs = append(libs, f)
		}
		if root != "" {
			rootLists.put(pid, rootList{exe: rootListKey(pid), files: listed})
		}
	}
	// A static program (no loader) carries its own allocator.
	lib, err = pickAllocator(exeF, libs)
	if err != nil {
		return lib, runtime, err
	}
	if lib == exeF && root == "" {
		// The executable is named by its path, as the loader's
		// libraries are, and as it is remembered.
		lib = stacks.LocalFile(canonical(exe))
	}
	if i := slices.IndexFunc(libs, IsCxxRuntime); i >= 0 {
		runtime = libs[i]
	}
	if keyed {
		execCache.put(key, interp.Name, names, lib.Path, runtime.Path)
	}
	return lib, runtime, nil
}

// fileOrNone is the local file at path, a zero File for "".
func fileOrNone(path string) stacks.File {
	if path == "" {
		return stacks.File{}
	}
	return stacks.LocalFile(path)
}

// AllocatorOfFile finds the file that would provide malloc to the program
// at path, run with the environment env ("KEY=value" strings), the way
// AllocatorOfExec does for a program already executed.
func AllocatorOfFile(path string, env []string) (stacks.File, error) {
	if err := CheckExecutable(path); err != nil {
		return stacks.File{}, err
	}
	exe, libs, err := filesOfProgram(path, env)
	if err != nil {
		return stacks.File{}, err
	}
	return pickAllocator(exe, libs)
}

// ProgramFiles returns the paths of the files the program at path maps
// as it starts, run with the environment env: the executable and the
// libraries its loader lists (the executable alone when the loader cannot
// list them; nil when it cannot tell: a script, a file it cannot read).
func ProgramFiles(path string, env []string) []string {
	exe, libs, _ := filesOfProgram(path, env)
	if exe.Path == "" {
		return nil
	}
	files := []string{exe.Path}
	for _, lib := range libs {
		files = append(files, lib.Path)
	}
	return files
}

// programLists are the lists of a program's files being made: callers
// that ask for the same program's, with the same environment, at once
// share one run of the loader. A launch asks twice as it starts: the parse
// ahead of its unwind tables (ProgramFiles) and the check that the shim
// can be preloaded (AllocatorOfFile).
var programLists = struct {
	mu sync.Mutex
	m  map[string]*programList
}{m: map[string]*programList{}}

// programList is one list being made; done is closed once it is.
type programList struct {
	done chan struct{}
	exe  stacks.File
	libs []stacks.File
	err  error
}

// filesOfProgram returns the executable at path and the libraries its
// loader lists, run with the environment env (none for a program without
// a loader). exe is zero when its interpreter cannot be read; it is set,
// without libs, when the loader's list fails (err).
func filesOfProgram(path string, env []string) (stacks.File, []stacks.File, error) {
	key := path + "\x00" + strings.Join(env, "\x00")
	programLists.mu.Lock()
	l := programLists.m[key]
	if l != nil {
		programLists.mu.Unlock()
		<-l.done
		return l.exe, slices.Clone(l.libs), l.err
	}
	l = &programList{done: make(chan struct{})}
	programLists.m[key] = l
	programLists.mu.Unlock()
	l.exe, l.libs, l.err = listProgram(path, env)
	programLists.mu.Lock()
	delete(programLists.m, key)
	programLists.mu.Unlock()
	close(l.done)
	return l.exe, slices.Clone(l.libs), l.err
}

// listProgram is filesOfProgram's loader run.
func listProgram(path string, env []string) (exe stacks.File, libs []stacks.File, err error) {
	interp, err := interpreter(path, path)
	if err != nil {
		return stacks.File{}, nil, err
	}
	exe = stacks.LocalFile(canonical(path))
	if interp == "" {
		return exe, nil, nil
	}
	names, err := loaderList(interp, path, []byte(strings.Join(env, "\x00")), "", "")
	if err != nil {
		return exe, nil, err
	}
	for _, n := range names {
		libs = append(libs, stacks.LocalFile(canonical(n)))
	}
	return exe, libs, nil
}

// loaderList runs the dynamic loader in list mode and returns the paths of
// the libraries it would load, in load order. dir, if not "", is the
// directory it runs in: the program's, against which relative paths in
// LD_LIBRARY_PATH and LD_PRELOAD resolve. root, if not "", is the root
// directory it runs in (a container's /proc/PID/root), in which interp,
// exe, dir and the paths listed are.
func loaderList(interp, exe string, environ []byte, dir, root string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, interp, "--list", exe)
	cmd.Dir = dir
	if root != "" {
		// The loader is looked for in the root, not in mdtrace's PATH.
		cmd.Path = interp
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		if dir == "" {
			cmd.Dir = "/"
		}
	}
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

// readExe returns the path of the executable of a process.
func readExe(pid int) (string, error) {
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
// named as the loader names them.
func loadedLibraries(pid int, exe string) []stacks.File {
	if l, ok := rootLists.get(pid); ok && l.exe == rootListKey(pid) {
		return l.files
	}
	env := procEnviron(pid)
	key, keyed := execKey(pid, exe, env)
	if !keyed {
		return nil
	}
	var out []stacks.File
	for _, name := range execCache.files(key) {
		out = append(out, stacks.LocalFile(name))
	}
	return out
}

// rootList is what the loader listed for a process in another root, which
// execCache does not keep: its program, and the files, named as the loader
// names them and opened in the process's root.
type rootList struct {
	exe   [2]fileID // the program's and the root's identities
	files []stacks.File
}

// rootListKey identifies the program process pid runs and its root, zero
// if either cannot be stat'ed.
func rootListKey(pid int) [2]fileID {
	exe, _ := exeID(pid)
	root, _ := statID(fmt.Sprintf("/proc/%d/root", pid))
	return [2]fileID{exe, root}
}

// rootLists keeps the last lists of processes in other roots, by PID,
// for loadedLibraries.
var rootLists = newMemo[int, rootList](256)
