//go:build linux

package tracer

import (
	"errors"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/bpf"
)

// A process's blocks carry the gen of the program that allocated them (the
// kernel's count of execs, see struct alloc_key in bpf/common.h), and
// the gens map holds each traced process's current gen once it executed a
// program. An exec thus needs no walk of the table: the probes stop seeing
// the old program's blocks at once, readers skip them, and the cleaner
// drops them with the next batch (Execed).

// currentGen returns the gen of process tgid's program; ok is false when
// the process executed no program since it was traced, and all its blocks
// are its program's.
func (p *Probes) currentGen(tgid int) (gen uint32, ok bool) {
	err := p.objs.Gens.Lookup(uint32(tgid), &gen)
	return gen, err == nil
}

// blocksOf returns whether a key is a block of process tgid's current
// program.
func (p *Probes) blocksOf(tgid int) func(*bpf.MdtraceAllocKey) bool {
	gen, known := p.currentGen(tgid)
	return func(k *bpf.MdtraceAllocKey) bool { return int(k.Tgid) == tgid && (!known || k.Gen == gen) }
}

// currentGens returns the gens map: whether a block is of its process's
// current program.
func (p *Probes) currentGens() (func(*bpf.MdtraceAllocKey) bool, error) {
	gens := map[uint32]uint32{}
	var (
		tgid, gen uint32
		it        = p.objs.Gens.Iterate()
	)
	for it.Next(&tgid, &gen) {
		gens[tgid] = gen
	}
	if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
		return nil, err
	}
	return func(k *bpf.MdtraceAllocKey) bool {
		g, ok := gens[k.Tgid]
		return !ok || g == k.Gen
	}, nil
}

// Execed records that process pid executed a new program (it is held at
// its exec): the blocks of the program before are its no longer, and go
// with the next batch of the cleaner (see Release). It is no zygote child
// any more.
func (p *Probes) Execed(pid int) {
	p.objs.Zygotes.Delete(uint32(pid))
	// The walks left to finish are the program's before, whose files
	// are gone from the list.
	p.deferMu.Lock()
	if p.deferExecs == nil {
		p.deferExecs = map[int]int{}
	}
	p.deferExecs[pid]++
	p.deferMu.Unlock()
	p.mu.Lock()
	if p.retired.execs == nil {
		p.retired.execs = map[int]bool{}
	}
	p.retired.execs[pid] = true
	delete(p.lastLen, pid)
	// The new program's shim, if any, did not start early.
	delete(p.early, pid)
	p.startCleanerLocked()
	p.mu.Unlock()
}
