//go:build linux

package tracer

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/unwind"
)

// sliceRules is a ruleSource of tables held in memory, by number.
type sliceRules map[uint32][]bpf.MdtraceUnwindEntry

func (s sliceRules) entry(table, i uint32) (bpf.MdtraceUnwindEntry, bool) {
	t := s[table]
	if int(i) >= len(t) {
		return bpf.MdtraceUnwindEntry{}, false
	}
	return t[i], true
}

// A known stack, as a program built without frame pointers leaves it:
// a function of a library (mapping B, file addresses from 0) called by
// another of B's that keeps a frame pointer, called by one of the
// executable (mapping A) without, called by the outermost frame.
const (
	stackBase = 0x7ffd00000000
	aStart    = 0x10000
	bStart    = 0x20000
	leafRA    = bStart + 0x10  // in B's leaf: CFA = rsp+16, rbp not saved
	framedRA  = bStart + 0x210 // in B's framed function: CFA = rbp+16, rbp at CFA-16
	callerRA  = aStart + 0x120 // in A's function: CFA = rsp+24, rbp not saved
	startRA   = aStart + 0x310 // in A's _start: the outermost frame
	savedRBP  = 0x5555         // what the framed function's caller had in rbp: data
)

func knownStack(t *testing.T) (*bpf.MdtraceUnwindProc, sliceRules, []byte) {
	t.Helper()
	rule := func(base uint8, off, rbp int32, stop uint8) uint32 {
		return packRule(unwind.Rule{Base: base, Offset: off, RBP: rbp, RA: -8, Stop: stop})
	}
	rules := sliceRules{
		1: { // A
			{Pc: 0, Rule: rule(unwind.BaseRSP, 8, 0, 0)},
			{Pc: 0x100, Rule: rule(unwind.BaseRSP, 24, 0, 0)},
			{Pc: 0x300, Rule: rule(unwind.BaseRSP, 8, 0, unwind.StopEnd)},
			{Pc: 0x400, Rule: rule(unwind.BaseNone, 0, 0, unwind.StopNoFDE)},
		},
		2: { // B
			{Pc: 0, Rule: rule(unwind.BaseRSP, 16, 0, 0)},
			{Pc: 0x200, Rule: rule(unwind.BaseRBP, 16, -16, 0)},
		},
	}
	up := &bpf.MdtraceUnwindProc{N: 2}
	up.M[0].Start, up.M[0].End, up.M[0].Bias, up.M[0].Table, up.M[0].Count = aStart, aStart+0x1000, aStart, 1, 4
	up.M[1].Start, up.M[1].End, up.M[1].Bias, up.M[1].Table, up.M[1].Count = bStart, bStart+0x1000, bStart, 2, 2
	stack := make([]byte, 128)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(stack[off:], v) }
	put(8, framedRA)  // the leaf's return address, CFA-8
	put(32, savedRBP) // the framed function's saved rbp, at its rbp
	put(40, callerRA) // its return address, CFA-8
	put(64, startRA)  // the caller's return address, CFA-8
	return up, rules, stack
}

// TestFinishWalkKnownStack: the Go walk that finishes what the probes
// left goes from a library's leaf through a frame-pointer frame and a
// frame without one to the outermost frame, whether it starts at a frame
// kept or at a caller not kept yet; and stops where the stack's copy ends,
// at the frame limit, and at a return address in no mapping.
func TestFinishWalkKnownStack(t *testing.T) {
	up, rules, stack := knownStack(t)
	regs := walkRegs{ip: leafRA, sp: stackBase, fp: stackBase + 32}
	whole := []uint64{leafRA, framedRA, callerRA, startRA}
	for _, c := range []struct {
		name   string
		frames []uint64
		caller bool
		stack  []byte
		depth  int
		want   []uint64
		end    int
	}{
		{"at a frame", []uint64{leafRA}, false, stack, 16, whole, walkComplete},
		{"at a caller", []uint64{aStart + 0x5}, true, stack, 16, append([]uint64{aStart + 0x5}, whole...), walkComplete},
		{"copy short", []uint64{leafRA}, false, stack[:64], 16, whole[:3], walkShort},
		{"frame limit", []uint64{leafRA}, false, stack, 3, whole[:3], walkTruncated},
		{"frame limit, exactly", []uint64{leafRA}, false, stack, 4, whole, walkComplete},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, end := finishWalkOf(up, rules, &stackCopy{base: stackBase, b: c.stack}, slices.Clone(c.frames), regs, c.caller, stackBase, c.depth)
			if !slices.Equal(got, c.want) || end != c.end {
				t.Errorf("frames %#x end %d, want %#x end %d", got, end, c.want, c.end)
			}
		})
	}

	// A return address in no mapping stops the walk, counted: the
	// caller's return address is outside both.
	bad := slices.Clone(stack)
	binary.LittleEndian.PutUint64(bad[40:], 0x900000)
	got, end := finishWalkOf(up, rules, &stackCopy{base: stackBase, b: bad}, []uint64{leafRA}, regs, false, stackBase, 16)
	if !slices.Equal(got, whole[:2]) || end != walkStopped {
		t.Errorf("a return address in no mapping: frames %#x end %d, want %#x stopped", got, end, whole[:2])
	}

	// The same list as the loader's notice writes it, unsorted.
	unsorted := *up
	unsorted.M[0], unsorted.M[1] = up.M[1], up.M[0]
	unsorted.Unsorted = 1
	got, end = finishWalkOf(&unsorted, rules, &stackCopy{base: stackBase, b: stack}, []uint64{leafRA}, regs, false, stackBase, 16)
	if !slices.Equal(got, whole) || end != walkComplete {
		t.Errorf("unsorted list: frames %#x end %d, want %#x complete", got, end, whole)
	}

	// Code in no mapping (generated) takes a frame-pointer step: rbp
	// points at a record of the framed function's caller's rbp and its
	// return address, then the walk goes on by the tables.
	fpRegs := walkRegs{ip: 0x900010, sp: stackBase + 16, fp: stackBase + 32}
	got, end = finishWalkOf(up, rules, &stackCopy{base: stackBase, b: stack}, []uint64{0x900010}, fpRegs, false, stackBase, 16)
	if want := []uint64{0x900010, callerRA, startRA}; !slices.Equal(got, want) || end != walkComplete {
		t.Errorf("generated code: frames %#x end %d, want %#x complete", got, end, want)
	}
}

// TestFindMappingOf: the mapping that holds a pc, sorted or not, as
// find_mapping finds it.
func TestFindMappingOf(t *testing.T) {
	up, _, _ := knownStack(t)
	for pc, want := range map[uint64]int{aStart: 0, aStart + 0xfff: 0, aStart + 0x1000: -1, bStart + 5: 1, 5: -1, bStart + 0x1000: -1} {
		if got := findMappingOf(up, pc); got != want {
			t.Errorf("findMappingOf(%#x) = %d, want %d", pc, got, want)
		}
	}
}

// TestFinishWalkRewritesStack: FinishWalk finishes deferred walks in a
// process's list (a file without a table: by its frame records), rewrites
// their ids' frames, and a snapshot gives the finished ones the id the
// probes give the same frames, one site with a block the probes walked
// whole; a walk it cannot finish (the copy ends) keeps its frames so far
// and an id of its own, counted.
func TestFinishWalkRewritesStack(t *testing.T) {
	p := smallTable(t)
	const (
		pid  = fakeTgid
		base = 0x7ffd00000000
	)
	var up bpf.MdtraceUnwindProc
	up.N = 1
	up.M[0].Start, up.M[0].End, up.M[0].Bias = 0x10000, 0x20000, 0x10000
	if err := p.unwind.procs.Put(uint32(pid), &up); err != nil {
		t.Fatal(err)
	}
	// The frame record at the stop: no caller's rbp, a return address.
	stack := make([]byte, 16)
	binary.LittleEndian.PutUint64(stack[8:], 0x10300)
	whole := []uint64{0x10100, 0x10200, 0x10300}
	ids := []uint64{1<<2 | abi.StackIDDeferred, 2<<2 | abi.StackIDDeferred, 3<<2 | abi.StackIDDeferred}
	hash := stackHash(whole, false)
	put := func(id uint64, frames []uint64) {
		var v stack16
		copy(v.Ips[:], frames)
		if err := p.objs.Stacks.Put(id, &v); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		put(id, whole[:1])
	}
	put(hash, whole)
	for i, id := range ids {
		w := &DeferredWalk{PID: pid, id: id, regs: walkRegs{ip: 0x10200, sp: base, fp: base}, caller: true, sp0: base,
			frames: whole[:1], stack: stack, received: time.Now()}
		if i == 2 {
			w.stack = nil
		}
		if !p.FinishWalk(w, false) {
			t.Fatalf("walk %d not finished with its process's list there", i)
		}
	}
	if d := p.DeferredCounts(); d != (DeferCounts{Finished: 2, Short: 1}) {
		t.Errorf("outcomes %+v, want 2 finished, 1 short", d)
	}
	if got := p.Stack(ids[0]); !slices.Equal(got, []uint64{0x100ff, 0x101ff, 0x102ff}) {
		t.Errorf("rewritten frames %#x", got)
	}
	keys := make([]bpf.MdtraceAllocKey, 4)
	infos := make([]bpf.MdtraceAllocInfo, 4)
	for i, id := range append(slices.Clone(ids), hash) {
		keys[i] = bpf.MdtraceAllocKey{Tgid: pid, Ptr: 0x5000 + 0x100*uint64(i)}
		infos[i] = bpf.MdtraceAllocInfo{Size: 100, StackId: id}
	}
	if err := p.tables.putBatch(keys, infos); err != nil {
		t.Fatal(err)
	}
	snap, err := p.Snapshot(pid)
	if err != nil {
		t.Fatal(err)
	}
	sites, _ := snap.Sites()
	if len(sites) != 2 || sites[0].StackID != hash || sites[0].Blocks != 3 || sites[1].StackID != ids[2] || sites[1].Blocks != 1 || len(sites[1].Frames) != 2 {
		t.Errorf("sites %+v, want %#x with 3 blocks and %#x with 1 of 2 frames (the caller, then the end of the copy)", sites, hash, ids[2])
	}
	if c, err := p.Counters(); err != nil || c.UnwindStopped != 1 {
		t.Errorf("UnwindStopped %d (%v), want the walk not finished", c.UnwindStopped, err)
	}
}
