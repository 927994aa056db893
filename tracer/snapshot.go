//go:build linux

package tracer

import (
	"fmt"
	"slices"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/leak"
)

// Forget drops every live allocation of process tgid, when it executes a
// new program: its old memory is gone.
func (p *Probes) Forget(tgid int) error {
	drop := func(k *bpf.MdtraceAllocKey) bool { return int(k.Tgid) == tgid }
	if err := p.dropTables(drop, map[int]bool{tgid: true}); err != nil {
		return fmt.Errorf("dropping the live table of process %d: %w", tgid, err)
	}
	p.objs.ExecNames.Delete(uint32(tgid))
	return nil
}

// dropTables deletes the blocks drop picks, in one walk of the table, and
// forgets the processes in tgids, which have no blocks left.
func (p *Probes) dropTables(drop func(*bpf.MdtraceAllocKey) bool, tgids map[int]bool) error {
	p.tables.mem.RLock()
	// A tier counted empty holds none of the blocks: the processes
	// dropped make no new ones.
	for _, tr := range p.tables.nonEmpty() {
		tr.each(func(key *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo, bk *bpf.MdtraceBucket, j int) {
			if drop(key) {
				tr.takeOut(bk, j, key)
			}
		})
	}
	p.tables.mem.RUnlock()
	p.dropOrphans(drop)
	p.mu.Lock()
	for tgid := range tgids {
		// A program executed in a zygote child is a program of its own.
		p.objs.Zygotes.Delete(uint32(tgid))
		delete(p.lastLen, tgid)
	}
	p.mu.Unlock()
	return nil
}

// Fork starts the table of child, a process forked from parent. A zygote
// child (forked without a vfork's promise to exec) starts with a copy of
// its parent's table, as its memory is a copy of its parent's, and what it
// allocates from now on is marked as a zygote child's (z 1 in heap dumps,
// bit 31 in leak info). Call it while the child is held before it runs.
func (p *Probes) Fork(parent, child int, zygote bool) error {
	p.reclaim(child)
	if !zygote {
		return nil
	}
	// The child's shim lists its copies of its parent's buffers where
	// its parent's does (a vfork child's are its parent's own).
	p.mu.Lock()
	if at, ok := p.early[parent]; ok {
		p.early[child] = at
	}
	p.mu.Unlock()
	var (
		keys  []bpf.MdtraceAllocKey
		infos []bpf.MdtraceAllocInfo
	)
	// The child's own blocks, if it has run already, stay. It runs its
	// parent's program: the same gen.
	if gen, known := p.currentGen(parent); known {
		if err := p.objs.Gens.Put(uint32(child), gen); err != nil {
			return fmt.Errorf("tracing process %d, forked from %d: %w", child, parent, err)
		}
	}
	parents := p.blocksOf(parent)
	own := map[uint64]bool{}
	err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
		switch {
		case parents(key):
			k := *key
			k.Tgid = uint32(child)
			keys = append(keys, k)
			infos = append(infos, *info)
		case int(key.Tgid) == child:
			own[key.Ptr] = true
		}
	})
	if err != nil {
		return err
	}
	if len(own) > 0 {
		n := 0
		for i := range keys {
			if !own[keys[i].Ptr] {
				keys[n], infos[n] = keys[i], infos[i]
				n++
			}
		}
		keys, infos = keys[:n], infos[:n]
	}
	if len(keys) > 0 {
		if err := p.tables.putBatch(keys, infos); err != nil {
			return fmt.Errorf("copying %d blocks of process %d to its child %d: %w", len(keys), parent, child, err)
		}
	}
	// The child hands over its copies of its parent's threads' batches,
	// whose blocks' frees the probes may keep for the parent.
	if err := p.copyOrphans(parents, child); err != nil {
		return fmt.Errorf("copying the frees kept for process %d to its child %d: %w", parent, child, err)
	}
	if err := p.objs.Zygotes.Put(uint32(child), uint32(1)); err != nil {
		return fmt.Errorf("marking process %d a zygote child: %w", child, err)
	}
	return p.objs.HaveZygotes.Set(uint32(1))
}

// Stack returns the frames of a stack id (return addresses minus one), or
// nil.
func (p *Probes) Stack(id uint64) []uint64 {
	if id == 0 {
		return nil
	}
	buf := make([]byte, 8*max(p.stackDepth, 1))
	if err := p.objs.Stacks.Lookup(id, &buf); err != nil {
		return nil
	}
	return decodeStack(buf, p.stackDepth)
}

func decodeStack(buf []byte, depth int) []uint64 {
	nr := 0
	for nr < depth && nr < len(buf)/8 && le64(buf[8*nr:]) != 0 {
		nr++
	}
	frames := make([]uint64, nr)
	for j := range frames {
		frames[j] = le64(buf[8*j:]) - 1
	}
	return frames
}

// allocOf is the live-table entry key, info as an allocation of a snapshot.
func allocOf(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) leak.Alloc {
	return leak.Alloc{
		Ptr:     key.Ptr,
		Size:    info.Size &^ abi.AllocZygote,
		Zygote:  info.Size&abi.AllocZygote != 0,
		StackID: info.StackId,
	}
}

// Snapshot reads the live allocations of process tgid, in no particular
// order, and their backtraces.
// Frames are return addresses minus one, as Android stores them.
func (p *Probes) Snapshot(tgid int) (*leak.Snapshot, error) {
	var (
		snap    *leak.Snapshot
		pending pendingCalls
	)
	// The batches and the kept frees first, then the table: a call that
	// leaves a batch meanwhile is in the table then. A batch drained
	// meanwhile (its thread ending) may be in both, partly: read again.
	for range batchReadAttempts {
		drained := p.drained()
		snap = &leak.Snapshot{PID: tgid, Stacks: map[uint64][]uint64{}, BacktraceSize: p.stackDepth, SampleBytes: p.sampleBytes}
		pending = p.pendingBatches(tgid)
		if err := p.readAllocs(tgid, snap); err != nil {
			return nil, err
		}
		if p.drained() == drained {
			break
		}
	}
	buf := make([]byte, 8*max(p.stackDepth, 1))
	for i := range snap.Allocs {
		id := snap.Allocs[i].StackID
		if id == 0 {
			continue
		}
		if _, ok := snap.Stacks[id]; ok {
			continue
		}
		if err := p.objs.Stacks.Lookup(id, &buf); err != nil {
			snap.Allocs[i].StackID = 0
			continue
		}
		snap.Stacks[id] = decodeStack(buf, p.stackDepth)
	}
	// A walk the probes left to mdtrace, finished, goes by the id their
	// own walk gives its frames: one site with the blocks of the same
	// backtrace, cut at the frame limit or not as the id says.
	for i := range snap.Allocs {
		id := snap.Allocs[i].StackID
		if h, ok := p.finishedID(id); ok {
			if frames, ok := snap.Stacks[id]; ok {
				snap.Stacks[h] = frames
				snap.Allocs[i].StackID = h
			}
		}
	}
	p.addPending(snap, pending)
	return snap, nil
}

// readAllocs reads the live allocations of process tgid into snap.Allocs.
// With the table's entry count known, they go straight into a slice that
// holds them all; else they are gathered in chunks and copied once into a
// slice of the right size: growing one slice by append would copy a table
// of a million allocations about five times.
func (p *Probes) readAllocs(tgid int, snap *leak.Snapshot) error {
	mine := p.blocksOf(tgid)
	if n, ok := p.tables.estimate(); ok {
		p.mu.Lock()
		if last, ok := p.lastLen[tgid]; ok {
			n = min(n, 2*last+4096)
		}
		p.mu.Unlock()
		// A little room for the entries added during the walk.
		allocs := make([]leak.Alloc, 0, n+n/64+64)
		err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
			if mine(key) {
				allocs = append(allocs, allocOf(key, info))
			}
		})
		if err != nil {
			return err
		}
		// The table may hold other processes' entries: give the room back.
		if cap(allocs) > 2*len(allocs)+1024 {
			allocs = slices.Clone(allocs)
		}
		snap.Allocs = allocs
		p.mu.Lock()
		if p.lastLen == nil {
			p.lastLen = map[int]int{}
		}
		p.lastLen[tgid] = len(allocs)
		p.mu.Unlock()
		return nil
	}
	var (
		chunks [][]leak.Alloc
		n      int
	)
	err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
		if !mine(key) {
			return
		}
		if len(chunks) == 0 || len(chunks[len(chunks)-1]) == cap(chunks[len(chunks)-1]) {
			chunks = append(chunks, make([]leak.Alloc, 0, min(1<<14, max(64, n))))
		}
		c := &chunks[len(chunks)-1]
		*c = append(*c, allocOf(key, info))
		n++
	})
	if err != nil {
		return err
	}
	if n > 0 {
		snap.Allocs = make([]leak.Alloc, 0, n)
		for _, c := range chunks {
			snap.Allocs = append(snap.Allocs, c...)
		}
	}
	return nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func le64(b []byte) uint64 {
	return uint64(le32(b)) | uint64(le32(b[4:]))<<32
}
