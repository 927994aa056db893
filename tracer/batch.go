//go:build linux

package tracer

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/leak"
)

// The shim's batches (shim/batch.c, struct md_batch): each thread of a
// launched command hands its allocations and frees to the probes a buffer
// at a time. Between two hand-overs the probes' table lacks the calls a
// buffer holds; a snapshot reads the buffers of the process from its
// memory and adds them (pendingBatches, addPending). Its layout is in
// abi/mdtrace_abi.h (abi.Batch*, abi.SizeofBatch, abi.OffsetofBatch*).

// batchReadAttempts is how many times a batch that changes under the read
// is read again.
const batchReadAttempts = 4

// pendingCall is a call a thread's batch holds.
type pendingCall struct {
	free   bool
	epoch  uint64
	ptr    uint64
	size   uint64
	frames []uint64 // return addresses, as the probes store them
	cut    bool     // the walk was cut at the frame limit with frames left
}

// pendingCalls are the calls the batches of a process hold, and the frees
// the probes keep aside for it, by address, with their epochs.
type pendingCalls struct {
	calls   []pendingCall
	orphans map[uint64][]uint64
}

// drained is the count of batches the probes drained at their threads' ends.
func (p *Probes) drained() uint64 {
	var n uint64
	if p.objs.BatchesDrained.Get(&n) != nil {
		return 0
	}
	return n
}

// pendingBatches reads the batches of process tgid's threads from its
// memory, the calls they hold in order, and the frees the probes keep
// aside for tgid. A batch that changes under every read (its thread
// handing it over meanwhile, so that the table gets its calls) is left
// out.
func (p *Probes) pendingBatches(tgid int) pendingCalls {
	addrs, err := p.batchAddrs(tgid)
	if err != nil && !errors.Is(err, ebpf.ErrIterationAborted) || len(addrs) == 0 {
		return pendingCalls{}
	}
	var calls []pendingCall
	buf := make([]byte, abi.SizeofBatch)
	for _, addr := range addrs {
		for range batchReadAttempts {
			words, ok := readBatch(tgid, addr, buf)
			if ok {
				calls = appendCalls(calls, words, p.stackDepth)
				break
			}
		}
	}
	if len(calls) == 0 {
		return pendingCalls{}
	}
	return pendingCalls{calls, p.orphansOf(tgid)}
}

// readBatch reads the batch at addr in process pid's memory into buf and
// returns its words in use, with false when the batch changed meanwhile
// or could not be read.
func readBatch(pid int, addr uint64, buf []byte) ([]uint64, bool) {
	if !readMem(pid, addr, buf) {
		return nil, false
	}
	seq := binary.LittleEndian.Uint64(buf[abi.OffsetofBatchSeq:])
	used := binary.LittleEndian.Uint64(buf[abi.OffsetofBatchUsed:])
	if seq%2 != 0 || used > abi.BatchWords {
		return nil, false
	}
	var again [8]byte
	if !readMem(pid, addr+abi.OffsetofBatchSeq, again[:]) || binary.LittleEndian.Uint64(again[:]) != seq {
		return nil, false
	}
	words := make([]uint64, used)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(buf[abi.OffsetofBatchWords+8*i:])
	}
	return words, true
}

// readMem reads len(buf) bytes at addr of process pid.
func readMem(pid int, addr uint64, buf []byte) bool {
	local := []unix.Iovec{{Base: &buf[0]}}
	local[0].SetLen(len(buf))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	return err == nil && n == len(buf)
}

// appendCalls decodes the events of a batch's words, as batch_event does,
// up to the first that makes no sense.
func appendCalls(calls []pendingCall, w []uint64, depth int) []pendingCall {
	// The batch's last frames, which an allocation with BatchStackPrev
	// names.
	var last []uint64
	for at := 0; at < len(w); {
		kind := w[at] & abi.BatchKindMask
		nr := int(w[at]>>abi.BatchFramesShift) & abi.BatchFramesMask
		c := pendingCall{epoch: w[at] >> abi.BatchEpochShift}
		switch {
		case kind == abi.BatchFree && at+2 <= len(w):
			c.free, c.ptr = true, w[at+1]
			at += 2
		case kind == abi.BatchSkip && nr <= depth && at+3+nr <= len(w):
			// An allocation freed in its own batch: neither call
			// counts, but its frames are the batch's last.
			if nr > 0 {
				last = w[at+3 : at+3+nr]
			}
			at += 3 + nr
			continue
		case kind == abi.BatchAlloc && nr <= depth && at+3+nr <= len(w):
			c.ptr, c.size = w[at+1], max(w[at+2], 1) // a block of size 0 is tracked as 1, as the probes do
			c.frames = w[at+3 : at+3+nr]
			if nr > 0 {
				last = c.frames
			} else if w[at]&abi.BatchStackPrev != 0 {
				c.frames = last
			}
			c.cut = w[at]&abi.BatchStackCut != 0
			at += 3 + nr
		default:
			return calls
		}
		calls = append(calls, c)
	}
	return calls
}

// addPending applies the calls of a process's batches to its snapshot,
// read after them. A batch's blocks stay allocated until the probes have
// its frees, so a pending free's block cannot have been handed out again:
// a pending free of an address takes the pending allocation of that
// address, whichever thread's batch holds it and in whatever order the
// batches were read, and else the snapshot's block. A pending allocation
// whose free the probes kept aside (orphans: written before the kept
// free's epoch) is gone; one already in the snapshot was handed over
// meanwhile (a thread ending). The same address can have two pending
// allocations: one freed at the unbatched site (kept aside), then the
// block's next life.
func (p *Probes) addPending(snap *leak.Snapshot, pending pendingCalls) {
	calls := pending.calls
	if len(calls) == 0 {
		return
	}
	allocs := map[uint64][]*pendingCall{}
	frees := map[uint64]int{}
	for i := range calls {
		c := &calls[i]
		if c.free {
			frees[c.ptr]++
		} else {
			allocs[c.ptr] = append(allocs[c.ptr], c)
		}
	}
	// Kept frees and pending allocations cancel as the probes will
	// cancel them: each allocation, the earliest first, against the
	// earliest kept free after it (take_kept_free).
	for ptr, kept := range pending.orphans {
		list := allocs[ptr]
		if len(list) == 0 {
			continue
		}
		slices.Sort(kept)
		slices.SortFunc(list, func(x, y *pendingCall) int { return cmp.Compare(x.epoch, y.epoch) })
		left := list[:0:0]
		used := make([]bool, len(kept))
		for _, c := range list {
			taken := false
			for i, e := range kept {
				if !used[i] && c.epoch < e {
					used[i], taken = true, true
					break
				}
			}
			if !taken {
				left = append(left, c)
			}
		}
		allocs[ptr] = left
	}
	// A pending free takes the latest pending allocation of its address,
	// else the snapshot's block.
	freed := map[uint64]bool{}
	for ptr, n := range frees {
		for ; n > 0; n-- {
			list := allocs[ptr]
			if len(list) == 0 {
				freed[ptr] = true
				break
			}
			latest := 0
			for i, c := range list {
				if c.epoch >= list[latest].epoch {
					latest = i
				}
			}
			allocs[ptr] = append(list[:latest:latest], list[latest+1:]...)
		}
	}
	kept := snap.Allocs[:0]
	for _, a := range snap.Allocs {
		if freed[a.Ptr] {
			continue
		}
		// Handed over meanwhile: the snapshot has it.
		if list := allocs[a.Ptr]; len(list) > 0 {
			allocs[a.Ptr] = list[1:]
		}
		kept = append(kept, a)
	}
	snap.Allocs = kept
	zygote := false
	var one uint32
	if p.objs.Zygotes.Lookup(uint32(snap.PID), &one) == nil {
		zygote = true
	}
	var on uint32
	btOn := p.objs.BacktraceOn.Get(&on) == nil && on != 0
	// By address: the map's order would change from one snapshot to the next.
	var left []*pendingCall
	for _, list := range allocs {
		left = append(left, list...)
	}
	slices.SortFunc(left, func(x, y *pendingCall) int { return cmp.Compare(x.ptr, y.ptr) })
	for _, c := range left {
		a := leak.Alloc{Ptr: c.ptr, Size: c.size, Zygote: zygote}
		if btOn && p.allocBacktraces && c.size >= p.btMin && c.size <= p.btMax && len(c.frames) > 0 {
			a.StackID = stackHash(c.frames, c.cut)
			if _, ok := snap.Stacks[a.StackID]; !ok {
				frames := make([]uint64, len(c.frames))
				for i, f := range c.frames {
					frames[i] = f - 1
				}
				snap.Stacks[a.StackID] = frames
			}
		}
		snap.Allocs = append(snap.Allocs, a)
	}
}

// keptFrees returns the frees the probes keep aside for the blocks pick
// picks, with their entries: an epoch, and how many frees (abi.KeptOne).
func (p *Probes) keptFrees(pick func(*bpf.MdtraceAllocKey) bool) ([]bpf.MdtraceAllocKey, []bpf.MdtraceKeptFree) {
	var (
		key  bpf.MdtraceAllocKey
		val  bpf.MdtraceKeptFree
		keys []bpf.MdtraceAllocKey
		vals []bpf.MdtraceKeptFree
		it   = p.objs.Orphans.Iterate()
	)
	for it.Next(&key, &val) {
		if pick(&key) {
			keys = append(keys, key)
			vals = append(vals, val)
		}
	}
	return keys, vals
}

// orphansOf returns the frees the probes keep aside for process tgid, by
// address, with their epochs.
func (p *Probes) orphansOf(tgid int) map[uint64][]uint64 {
	keys, vals := p.keptFrees(p.blocksOf(tgid))
	out := make(map[uint64][]uint64, len(keys))
	for i, k := range keys {
		// A block's kept frees are under its address with a way number
		// in its low bits (bpf/batch.h, orphan_key).
		ptr := k.Ptr &^ (abi.OrphanWays - 1)
		out[ptr] = append(out[ptr], keptEpochs(vals[i].Val)...)
	}
	return out
}

// keptEpochs returns the epochs of the frees a kept entry's value stands
// for (abi.KeptOne): each of them with the entry's epoch.
func keptEpochs(v uint64) []uint64 {
	e := v & (abi.KeptOne - 1)
	return slices.Repeat([]uint64{e}, int(v/abi.KeptOne))
}

// dropOrphans deletes the frees kept aside for the blocks drop picks,
// those of processes that ended or executed another program: no
// allocation will come for them.
func (p *Probes) dropOrphans(drop func(*bpf.MdtraceAllocKey) bool) {
	keys, _ := p.keptFrees(drop)
	for _, k := range keys {
		p.objs.Orphans.Delete(k)
	}
}

// copyOrphans gives process child a copy of the frees kept aside for the
// blocks parents picks.
func (p *Probes) copyOrphans(parents func(*bpf.MdtraceAllocKey) bool, child int) error {
	keys, vals := p.keptFrees(parents)
	for i, k := range keys {
		k.Tgid = uint32(child)
		v := vals[i]
		v.Key = k
		if err := p.objs.Orphans.Put(k, v); err != nil {
			return err
		}
		p.copiedFrees.Add(v.Val / abi.KeptOne)
	}
	return nil
}

// stackHash is the id the probes give a backtrace (stack_id_of), cut at
// the frame limit with frames left or not.
func stackHash(frames []uint64, cut bool) uint64 {
	h := uint64(len(frames))
	for _, f := range frames {
		h = abi.Mix64(h ^ f)
	}
	// The lowest bit marks a backtrace cut at the frame limit; the next
	// is never a hash's (a deferred walk's number has it).
	h &^= abi.StackIDTruncated | abi.StackIDDeferred
	if cut {
		h |= abi.StackIDTruncated
	}
	if h == 0 {
		h = 4
	}
	return h
}

// BatchAddrs returns the addresses of the batches of process tgid's
// threads, the shim's memory: the blocks they name are not the program's
// references.
func (p *Probes) BatchAddrs(tgid int) []uint64 {
	addrs, _ := p.batchAddrs(tgid)
	return addrs
}

// batchAddrs returns the addresses of the batches of process tgid's
// threads, and the error that ended the walk of the table of threads, if
// any (ebpf.ErrIterationAborted: it changed under the walk, some may be
// missing).
func (p *Probes) batchAddrs(tgid int) ([]uint64, error) {
	var (
		tid   uint32
		bt    bpf.MdtraceBatchThread
		addrs []uint64
		it    = p.objs.BatchThreads.Iterate()
	)
	for it.Next(&tid, &bt) {
		if int(bt.Tgid) == tgid {
			addrs = append(addrs, bt.Addr)
		}
	}
	// A buffer that registers meanwhile is in both lists: it is read once.
	for _, a := range p.earlyAddrs(tgid) {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs, it.Err()
}

// CountPending tells the probes where the shim loaded into process pid
// (--inject) counts the allocations its batches hold (at, in the
// process's memory; 0 forgets it): a batched free of a block the table
// does not hold, with no allocation counted at its hash, is of a block
// from before the attach, and is not kept aside.
func (p *Probes) CountPending(pid int, at uint64) error {
	if at == 0 {
		err := p.objs.InjectPending.Delete(uint32(pid))
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return err
	}
	return p.objs.InjectPending.Put(uint32(pid), at)
}
