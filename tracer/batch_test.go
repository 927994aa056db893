//go:build linux

package tracer

import (
	"slices"
	"testing"

	"github.com/mdtrace/mdtrace/abi"
)

// TestBatchDecodePrev decodes a batch whose allocations name the batch's
// last frames (abi.BatchStackPrev): those of an allocation, and those of
// one taken back (abi.BatchSkip), as the probes take them.
func TestBatchDecodePrev(t *testing.T) {
	ev := func(kind, nr, flags, epoch uint64) uint64 {
		return kind | nr<<abi.BatchFramesShift | flags | epoch<<abi.BatchEpochShift
	}
	a := []uint64{0x1001, 0x2002, 0x3003}
	b := []uint64{0x4004, 0x5005}
	var w []uint64
	w = append(w, ev(abi.BatchAlloc, 3, 0, 7), 0x100, 10)
	w = append(w, a...)
	w = append(w, ev(abi.BatchAlloc, 0, abi.BatchStackPrev, 7), 0x200, 20)
	w = append(w, ev(abi.BatchFree, 0, 0, 8), 0x100)
	w = append(w, ev(abi.BatchSkip, 2, abi.BatchStackCut, 8), 0x300, 30)
	w = append(w, b...)
	w = append(w, ev(abi.BatchAlloc, 0, abi.BatchStackPrev|abi.BatchStackCut, 9), 0x400, 40)
	// Without frames and without the flag: no backtrace.
	w = append(w, ev(abi.BatchAlloc, 0, 0, 9), 0x500, 50)

	calls := appendCalls(nil, w, 16)
	want := []pendingCall{
		{epoch: 7, ptr: 0x100, size: 10, frames: a},
		{epoch: 7, ptr: 0x200, size: 20, frames: a},
		{epoch: 8, ptr: 0x100, free: true},
		{epoch: 9, ptr: 0x400, size: 40, frames: b, cut: true},
		{epoch: 9, ptr: 0x500, size: 50},
	}
	if len(calls) != len(want) {
		t.Fatalf("%d calls decoded, want %d: %+v", len(calls), len(want), calls)
	}
	for i, c := range calls {
		w := want[i]
		if c.free != w.free || c.epoch != w.epoch || c.ptr != w.ptr || c.size != w.size || c.cut != w.cut ||
			!slices.Equal(c.frames, w.frames) {
			t.Errorf("call %d = %+v, want %+v", i, c, w)
		}
	}
}
