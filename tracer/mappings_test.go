//go:build linux

package tracer

import (
	"fmt"
	"testing"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// TestAllocatorMappingsApply: the allocator's mappings are joined where
// they touch, cut by an unmap or a fixed mapping of any part, and gone
// with an exec.
func TestAllocatorMappingsApply(t *testing.T) {
	m := &allocatorMappings{procs: map[int][][2]uint64{}}
	ev := func(kind uint32, start, len uint64) {
		m.apply(&bpf.MdtraceMappingEvent{Tgid: 7, Kind: kind, Start: start, Len: len})
	}
	show := func() string { return fmt.Sprintf("%x", m.procs[7]) }
	ev(abi.MappingAllocator, 0x200000, 0x100000)
	ev(abi.MappingAllocator, 0x400000, 0x1000)
	ev(abi.MappingAllocator, 0x300000, 0x100000) // joins both
	if got, want := show(), "[[200000 401000]]"; got != want {
		t.Fatalf("after three maps %s, want %s", got, want)
	}
	ev(abi.MappingGone, 0x280000, 0x10) // an unmap of part of a page: the page goes
	if got, want := show(), "[[200000 280000] [281000 401000]]"; got != want {
		t.Fatalf("after an unmap %s, want %s", got, want)
	}
	ev(abi.MappingGone, 0x100000, 0x181000) // the whole first range and more
	if got, want := show(), "[[281000 401000]]"; got != want {
		t.Fatalf("after a larger unmap %s, want %s", got, want)
	}
	ev(abi.MappingAllocator, 0x300000, 0x1000) // mapped again (mremap's new place)
	if got, want := show(), "[[281000 401000]]"; got != want {
		t.Fatalf("after a map inside %s, want %s", got, want)
	}
	ev(abi.MappingReset, 0, 0)
	if _, ok := m.procs[7]; ok {
		t.Fatalf("after an exec %s, want none", show())
	}
}
