//go:build linux

package tracer

import (
	"errors"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/bpf"
)

// What --all --inject reads of each process: how often it calls the
// allocator (the probes count it with ProbeConfig's CountCalls), and the
// blocks the probes hold of it, which the shim loaded into it takes over.

// ProcCalls returns each process's count of allocator calls (ProbeConfig's
// CountCalls), which wraps at 2^32, and forgets the processes not alive.
func (p *Probes) ProcCalls(alive func(pid int) bool) (map[int]uint32, error) {
	out := map[int]uint32{}
	var (
		tgid, n uint32
		gone    []uint32
		it      = p.objs.ProcCalls.Iterate()
	)
	for it.Next(&tgid, &n) {
		if alive(int(tgid)) {
			out[int(tgid)] = n
		} else {
			gone = append(gone, tgid)
		}
	}
	if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
		return nil, err
	}
	for _, t := range gone {
		p.objs.ProcCalls.Delete(t)
	}
	return out, nil
}

// ProcCallsOf returns process pid's count of allocator calls (ProcCalls).
func (p *Probes) ProcCallsOf(pid int) (uint32, error) {
	var n uint32
	err := p.objs.ProcCalls.Lookup(uint32(pid), &n)
	return n, err
}

// LiveAddrs returns the addresses of the blocks of process tgid's current
// program in the live table.
func (p *Probes) LiveAddrs(tgid int) ([]uint64, error) {
	mine := p.blocksOf(tgid)
	var out []uint64
	err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo) {
		if mine(key) {
			out = append(out, key.Ptr)
		}
	})
	return out, err
}
