//go:build linux

package tracer

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
)

// TestExecCache: a remembered allocator is used again only while every
// file it was drawn from is unchanged.
func TestExecCache(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{}
	for _, name := range []string{"ld.so", "libfirst.so", "libmalloc.so", "libstdc++.so.6"} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := &execMemo{m: newMemo[execKeyT, execEntry](maxExecCache)}
	k := execKeyT{exePath: "/bin/prog", env: "LD_PRELOAD=x"}
	c.put(k, files["ld.so"], []string{files["libfirst.so"], files["libmalloc.so"], files["libstdc++.so.6"]},
		files["libmalloc.so"], files["libstdc++.so.6"])
	if lib, runtime, ok := c.get(k); !ok || lib != files["libmalloc.so"] || runtime != files["libstdc++.so.6"] {
		t.Fatalf("get = %q, %q, %v; want %q, %q", lib, runtime, ok, files["libmalloc.so"], files["libstdc++.so.6"])
	}
	other := k
	other.env = ""
	if _, _, ok := c.get(other); ok {
		t.Error("another environment got the remembered answer")
	}
	// A library rebuilt (here one byte longer) may define malloc now.
	if err := os.WriteFile(files["libfirst.so"], []byte("libfirst.so+"), 0o644); err != nil {
		t.Fatal(err)
	}
	if lib, _, ok := c.get(k); ok {
		t.Errorf("get after a listed library changed = %q, want nothing", lib)
	}
	if c.m.len() != 0 {
		t.Errorf("a stale answer is still remembered: %d entries", c.m.len())
	}
}

// TestExecKey: the key holds the loader's variables only, and the working
// directory only when one of them names a relative path.
func TestExecKey(t *testing.T) {
	pid := os.Getpid()
	env := []byte("PATH=/bin\x00LD_PRELOAD=/lib/a.so\x00HOME=/root\x00GLIBC_TUNABLES=glibc.malloc.tcache_count=0\x00")
	k, ok := execKey(pid, "/bin/prog", env)
	if !ok {
		t.Fatal("no key for this process")
	}
	if want := "LD_PRELOAD=/lib/a.so\x00GLIBC_TUNABLES=glibc.malloc.tcache_count=0"; k.env != want || k.cwd != "" {
		t.Errorf("key env %q cwd %q; want %q and no directory", k.env, k.cwd, want)
	}
	k, _ = execKey(pid, "/bin/prog", []byte("LD_LIBRARY_PATH=/lib:build/lib\x00"))
	if wd, _ := os.Getwd(); k.cwd != wd {
		t.Errorf("key cwd %q with a relative LD_LIBRARY_PATH, want %q", k.cwd, wd)
	}
}

// TestMemo: a full memo is emptied before the next entry goes in.
func TestMemo(t *testing.T) {
	m := newMemo[string, int](2)
	m.put("a", 1)
	m.put("b", 2)
	if v, ok := m.get("b"); !ok || v != 2 || m.len() != 2 {
		t.Fatalf("get(b) = %d, %v; len %d", v, ok, m.len())
	}
	m.put("c", 3)
	if _, ok := m.get("a"); ok || m.len() != 1 {
		t.Errorf("full: a kept or len %d, want 1", m.len())
	}
	m.drop("c")
	if _, ok := m.get("c"); ok || m.len() != 0 {
		t.Errorf("dropped c: still there or len %d", m.len())
	}
}

// TestRDebugAddress finds a running program's loader and the loader's
// r_debug, each twice (the second time from the caches): r_version is 1 or
// 2, r_map is set.
func TestRDebugAddress(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	var loader stacks.File
	for range 100 {
		// The loader is mapped once sleep runs its own program, and
		// the auxiliary vector names where: /proc/PID/exe names the
		// program a moment before (LoaderOf would find the loader by
		// its path then, and by its mapping the second time).
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if base, err := loaderBase(pid); err == nil && base != 0 && strings.HasSuffix(exe, "sleep") {
			if l, err := LoaderOf(pid); err == nil && l.Name != "" {
				if _, err := rDebugAddress(pid, l); err == nil {
					loader = l
					break
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if loader.Name == "" {
		t.Fatal("sleep's loader was never mapped")
	}
	// The loader of sleep's program is remembered by the program's file.
	if id, ok := statID(fmt.Sprintf("/proc/%d/exe", pid)); !ok {
		t.Error("cannot stat sleep's program")
	} else if got, ok := interpCache.get(id); !ok || got != loader.Name {
		t.Errorf("remembered loader %q, %v; want %q", got, ok, loader.Name)
	}
	if again, err := LoaderOf(pid); err != nil || again != loader {
		t.Errorf("LoaderOf again = %q, %v; want %q", again, err, loader)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	for i := range 2 {
		addr, err := rDebugAddress(pid, loader)
		if err != nil {
			t.Fatal(err)
		}
		// The loader fills r_debug in as it starts the program.
		var version uint32
		var rmap uint64
		for range 200 {
			var rd [16]byte
			if _, err := mem.ReadAt(rd[:], int64(addr)); err != nil {
				t.Fatalf("reading r_debug at %#x: %v", addr, err)
			}
			version, rmap = binary.LittleEndian.Uint32(rd[:4]), binary.LittleEndian.Uint64(rd[8:])
			if version != 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if version < 1 || version > 2 || rmap == 0 {
			t.Errorf("lookup %d: r_debug at %#x: r_version %d, r_map %#x", i, addr, version, rmap)
		}
	}
	if _, err := rDebugAddress(pid, stacks.LocalFile("/bin/true")); err == nil {
		t.Error("r_debug found in a program that is not the loader")
	}
}

// TestFromFile: a value is kept for the file as it is, read again once the
// file changes, and not kept when the file changed during the read.
func TestFromFile(t *testing.T) {
	path := t.TempDir() + "/f"
	if err := os.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newMemo[fileID, string](4)
	reads := 0
	read := func() (string, error) {
		reads++
		b, err := os.ReadFile(path)
		return string(b), err
	}
	for range 2 {
		if v, id, err := fromFile(c, path, byID, read); err != nil || v != "a" || id.ino == 0 {
			t.Fatalf("fromFile = %q, %+v, %v", v, id, err)
		}
	}
	if reads != 1 {
		t.Errorf("%d reads of an unchanged file, want 1", reads)
	}
	if err := os.WriteFile(path, []byte("bb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := fromFile(c, path, byID, read); v != "bb" || reads != 2 {
		t.Errorf("after a change: %q after %d reads, want \"bb\" after 2", v, reads)
	}
	// Changed while being read: the value is not kept.
	changing := func() (string, error) {
		reads++
		return "stale", os.WriteFile(path, []byte("ccc"), 0o644)
	}
	c = newMemo[fileID, string](4)
	if _, _, err := fromFile(c, path, byID, changing); err != nil {
		t.Fatal(err)
	}
	if c.len() != 0 {
		t.Errorf("a value read while the file changed is kept")
	}
	missing := t.TempDir() + "/missing"
	readMissing := func() (string, error) {
		b, err := os.ReadFile(missing)
		return string(b), err
	}
	if _, id, err := fromFile(c, missing, byID, readMissing); err == nil || id != (fileID{}) {
		t.Errorf("missing file: identity %+v, error %v", id, err)
	}
}

// TestFilesOfProgramShared: a caller that asks for a program's files while
// another's loader run for the same program and environment is under way
// waits for it and gets its answer; once it is made, the next runs anew.
func TestFilesOfProgramShared(t *testing.T) {
	const path = "/usr/bin/true"
	env := []string{"A=1"}
	key := path + "\x00" + strings.Join(env, "\x00")
	// A run under way, whose answer no loader would give.
	l := &programList{done: make(chan struct{}), exe: stacks.File{Name: "shared", Path: "/shared"},
		libs: []stacks.File{{Name: "libshared.so", Path: "/libshared.so"}}}
	programLists.mu.Lock()
	programLists.m[key] = l
	programLists.mu.Unlock()
	got := make(chan []string, 1)
	go func() { got <- ProgramFiles(path, env) }()
	select {
	case files := <-got:
		t.Fatalf("answered %v before the run under way ended", files)
	case <-time.After(50 * time.Millisecond):
	}
	programLists.mu.Lock()
	delete(programLists.m, key)
	programLists.mu.Unlock()
	close(l.done)
	if files := <-got; strings.Join(files, " ") != "/shared /libshared.so" {
		t.Errorf("files %v, want the shared run's: /shared /libshared.so", files)
	}
	// No run under way: the loader lists the program's own.
	if files := ProgramFiles(path, env); len(files) < 2 || files[0] != path || !slices.ContainsFunc(files, func(f string) bool { return strings.Contains(f, "libc.so") }) {
		t.Errorf("files %v, want %s and its C library", files, path)
	}
}

// TestHeld: while a process is Held, its executable, its identity, its
// environment and its loader's base are what they are read as without,
// and read once: a second read gives the first even after the process
// has changed (it cannot while really held; here it has exited). Released,
// they are read again.
func TestHeld(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "60")
	cmd.Env = []string{"HELD_TEST=1"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	// Until its exec is done, the child is a copy of this test, or a
	// process without its environment and auxiliary vector yet.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		exe, _ := readExe(pid)
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		base, _ := readLoaderBase(pid)
		if strings.HasSuffix(exe, "/sleep") && len(env) > 0 && base != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sleep did not start")
		}
	}
	release := Held(pid)
	exe, err := procExe(pid)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := readExe(pid)
	id, ok := exeID(pid)
	env := procEnviron(pid)
	base, err := loaderBase(pid)
	wantBase, _ := readLoaderBase(pid)
	if exe != want || !ok || string(env) != "HELD_TEST=1\x00" || err != nil || base != wantBase || base == 0 {
		t.Fatalf("held: exe %q (want %q), id %v %v, environ %q, base %#x %v (want %#x)", exe, want, id, ok, env, base, err, wantBase)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Skip("the process is still there")
	}
	exe2, err2 := procExe(pid)
	id2, ok2 := exeID(pid)
	base2, berr2 := loaderBase(pid)
	if exe2 != exe || err2 != nil || id2 != id || !ok2 || string(procEnviron(pid)) != string(env) || base2 != base || berr2 != nil {
		t.Errorf("held, read again once gone: exe %q %v, id %v %v, base %#x %v", exe2, err2, id2, ok2, base2, berr2)
	}
	release()
	if _, err := procExe(pid); err == nil {
		t.Error("released, procExe still answers for a process gone")
	}
	if procEnviron(pid) != nil {
		t.Error("released, procEnviron still answers for a process gone")
	}
}
