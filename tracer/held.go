//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// A process held at a ptrace stop (its exec) cannot change its program,
// its environment or its auxiliary vector. The hook that runs there reads
// each of them several times: finding the allocator, making the unwind
// list, watching the loader. Each read is a system call on /proc, 10 to
// 20 µs on the machines measured. While the process is Held, each is read
// once.

// heldFacts are what has been read of a held process.
type heldFacts struct {
	mu      sync.Mutex
	exe     heldValue[string]
	exeID   heldValue[fileID]
	environ heldValue[[]byte]
	base    heldValue[uint64]
}

// heldValue is one fact, once read.
type heldValue[T any] struct {
	v    T
	err  error
	read bool
}

var heldProcs = struct {
	mu    sync.Mutex
	procs map[int]*heldFacts
}{procs: map[int]*heldFacts{}}

// Held says that process pid is held at a ptrace stop until release is
// called, as the Exec hook's process is: what the tracer reads meanwhile
// of its program, environment and auxiliary vector is read once.
func Held(pid int) (release func()) {
	f := &heldFacts{}
	heldProcs.mu.Lock()
	heldProcs.procs[pid] = f
	heldProcs.mu.Unlock()
	return func() {
		heldProcs.mu.Lock()
		if heldProcs.procs[pid] == f {
			delete(heldProcs.procs, pid)
		}
		heldProcs.mu.Unlock()
	}
}

// heldRead returns what read returns for process pid: once while it is
// held (fact picks where the answer is kept), every time otherwise.
func heldRead[T any](pid int, fact func(*heldFacts) *heldValue[T], read func() (T, error)) (T, error) {
	heldProcs.mu.Lock()
	f := heldProcs.procs[pid]
	heldProcs.mu.Unlock()
	if f == nil {
		return read()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h := fact(f)
	if !h.read {
		h.v, h.err = read()
		h.read = true
	}
	return h.v, h.err
}

// procExe returns the path of process pid's executable, without the
// " (deleted)" the kernel adds to a file removed since.
func procExe(pid int) (string, error) {
	return heldRead(pid, func(f *heldFacts) *heldValue[string] { return &f.exe }, func() (string, error) { return readExe(pid) })
}

// exeID is statID of process pid's /proc/PID/exe.
func exeID(pid int) (fileID, bool) {
	id, err := heldRead(pid, func(f *heldFacts) *heldValue[fileID] { return &f.exeID }, func() (fileID, error) {
		id, ok := statID(fmt.Sprintf("/proc/%d/exe", pid))
		if !ok {
			return id, errNoStat
		}
		return id, nil
	})
	return id, err == nil
}

// errNoStat is exeID's failure, kept while the process is held.
var errNoStat = errors.New("cannot stat")

// procEnviron returns process pid's environment (NUL-separated), nil if
// it cannot be read.
func procEnviron(pid int) []byte {
	env, _ := heldRead(pid, func(f *heldFacts) *heldValue[[]byte] { return &f.environ }, func() ([]byte, error) {
		return os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	})
	return env
}

// loaderBase returns where the kernel mapped process pid's dynamic loader
// (AT_BASE), 0 for a static program.
func loaderBase(pid int) (uint64, error) {
	return heldRead(pid, func(f *heldFacts) *heldValue[uint64] { return &f.base }, func() (uint64, error) { return readLoaderBase(pid) })
}
