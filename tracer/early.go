//go:build linux

package tracer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/stacks"
)

// An early start (abi.EnvEarly): a launched command runs while mdtrace
// loads its programs, and its shim holds what it would hand over to the
// probes until mdtrace writes abi.EarlyReady in its word abi.SymbolReady.
// The buffers of its threads that have not handed a batch over yet are
// unknown to the probes: the shim lists them (abi.SymbolEarlyBatches), and
// the reports read them from there as well (batchAddrs).

// shimSymbol returns the address, in process pid, of the shim's dynamic
// symbol name; 0 when the process does not map the shim (yet). shim is
// the shim's file, as mdtrace preloaded it.
func shimSymbol(pid int, shim, name string) (uint64, error) {
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return 0, ErrProcessGone
	}
	want, err := os.Stat(shim)
	if err != nil {
		return 0, err
	}
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		if m.Offset != 0 || m.Path == "" || m.Path[0] != '/' {
			continue
		}
		file := stacks.MappedFile(pid, m)
		if fi, err := os.Stat(file.Path); err != nil || !os.SameFile(fi, want) {
			continue
		}
		addr, err := symbolAddress(file.Path, name)
		if err != nil {
			return 0, fmt.Errorf("process %d: %s: %w", pid, shim, err)
		}
		return m.Start + addr, nil
	}
	return 0, nil
}

// ErrShimNotWaiting is AnnounceReady's error when the shim of the process
// did not start waiting in time.
var ErrShimNotWaiting = errors.New("its shim did not start")

// AnnounceReady tells the shim in process pid, started early, that its
// probes are in place: once the shim has said that it waits
// (abi.EarlyWaiting, written as it starts, when the loader is done with
// its data), mdtrace calls before with the word's address, then writes
// abi.EarlyReady there. It polls every millisecond until then, for timeout
// at most; a process that is gone, or that executed another program
// (whose shim does not wait), ends it with ErrProcessGone. A word read as
// abi.EarlyReady already (a fork child of a process told) is left alone.
// at is the word's address if known (a fork child's is its parent's), else
// 0; the address is returned. stop ends the wait with ErrProcessGone
// when it reports true (the process executed another program, or exited).
func AnnounceReady(pid int, shim string, at uint64, timeout time.Duration, before func(at uint64), stop func() bool) (uint64, error) {
	deadline := time.Now().Add(timeout)
	var word [4]byte
	for {
		if stop() {
			return at, ErrProcessGone
		}
		if at == 0 {
			var err error
			if at, err = shimSymbol(pid, shim, abi.SymbolReady); err != nil {
				return 0, err
			}
		}
		if at != 0 {
			if !readMem(pid, at, word[:]) {
				return at, ErrProcessGone
			}
			switch binary.LittleEndian.Uint32(word[:]) {
			case abi.EarlyReady:
				return at, nil
			case abi.EarlyWaiting:
				before(at)
				if err := writeReady(pid, at); err != nil {
					if errors.Is(err, unix.ESRCH) {
						return at, ErrProcessGone
					}
					return at, fmt.Errorf("process %d: telling the shim mdtrace is ready: %w", pid, err)
				}
				return at, nil
			}
		}
		if time.Now().After(deadline) {
			return at, ErrShimNotWaiting
		}
		time.Sleep(time.Millisecond)
	}
}

// ListEarly makes the reports of process tgid read the buffers its shim
// lists as not registered with the probes yet, at address at of its
// memory (abi.SymbolEarlyBatches; 0 forgets it). A fork child copies its
// parent's (Fork), an exec drops it (Execed).
func (p *Probes) ListEarly(tgid int, at uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if at == 0 {
		delete(p.early, tgid)
		return
	}
	if p.early == nil {
		p.early = map[int]uint64{}
	}
	p.early[tgid] = at
}

// EarlyListed reports whether the reports of process tgid read its shim's
// list of buffers not registered yet (ListEarly).
func (p *Probes) EarlyListed(tgid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.early[tgid]
	return ok
}

// EarlyPending returns how many buffers process tgid's shim lists as not
// registered with the probes yet (read from its memory: 0 if it cannot
// be read, or the process started as usual).
func (p *Probes) EarlyPending(tgid int) int {
	return len(p.earlyAddrs(tgid))
}

// ShimEarlyList returns where process pid's shim lists its buffers not
// registered yet (abi.SymbolEarlyBatches), 0 if it does not map the shim.
func ShimEarlyList(pid int, shim string) (uint64, error) {
	return shimSymbol(pid, shim, abi.SymbolEarlyBatches)
}

// earlyAddrs returns the buffers process tgid's shim lists as not
// registered with the probes yet, none if it started as usual.
func (p *Probes) earlyAddrs(tgid int) []uint64 {
	p.mu.Lock()
	at, ok := p.early[tgid]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	buf := make([]byte, 8*abi.EarlyBatches)
	if !readMem(tgid, at, buf) {
		return nil
	}
	var addrs []uint64
	for i := range abi.EarlyBatches {
		if a := binary.LittleEndian.Uint64(buf[8*i:]); a != 0 {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// writeReady writes abi.EarlyReady in the shim's word at address at of
// process pid (abi.SymbolReady): the probes are in place.
func writeReady(pid int, at uint64) error {
	var word [4]byte
	binary.LittleEndian.PutUint32(word[:], abi.EarlyReady)
	return writeMem(pid, at, word[:])
}
