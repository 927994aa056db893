package unreach

import (
	"sort"
	"strings"

	"github.com/mdtrace/mdtrace/stacks"
)

// Range is [Start, End) in the process's address space.
type Range struct{ Start, End uint64 }

// RedZone is how far below a thread's stack pointer its stack is a root:
// the x86-64 ABI lets a function that calls nothing keep values in the 128
// bytes below the stack pointer.
const RedZone = 128

// glibcHeapMax is glibc's HEAP_MAX_SIZE on 64-bit systems: a heap of an
// arena other than the main one is a mapping of this size, aligned to it,
// of which the part in use is readable and the rest PROT_NONE.
const glibcHeapMax = 64 << 20

// Layout is what Classify chooses: the root ranges, and the ranges of the
// heap to read for the blocks.
type Layout struct {
	// Globals are whole mappings whose every word is a root.
	Globals []Range
	// Stacks are the threads' stacks, each from the stack pointer (less
	// the red zone) to the end of the mapping that holds it.
	Stacks []Range
	// Runs are the ranges of memory to read for the blocks: blocks close
	// to each other in one mapping are read together, with the 16 bytes
	// before each (glibc's chunk header).
	Runs []Range
	// Outside counts the blocks that no readable mapping holds.
	Outside int
}

// Known is what mdtrace knows of a process's mappings beyond its maps.
type Known struct {
	// Addrs are addresses inside mdtrace's own mappings in the process
	// (the shim's), which are neither roots nor heap.
	Addrs []uint64
	// File reports whether a mapped file is mdtrace's (the shim).
	File func(path string) bool
	// Allocator are the anonymous ranges the allocator mapped for itself,
	// sorted: heap, never roots. Its metadata there (jemalloc's extent
	// records and radix tree, tcmalloc's spans) holds the address of
	// every extent, and so of blocks.
	Allocator []Range
	// Late says the process ran before mdtrace attached (-p): its blocks
	// from before are not in the table, and may hold the addresses of
	// blocks made since. Then the heap outside the known blocks, byte for
	// byte, is read as roots ([heap], glibc's arenas' heaps, anonymous
	// memory): a lost block may look reachable, a reachable one is never
	// called lost.
	Late bool
}

// page is the size of a page.
const page = 4096

// runGap is the largest gap between two blocks read as one run.
const runGap = 256

// Classify picks the roots and the heap of a process from its maps, its
// threads' stack pointers and its live blocks (sorted by address), as
// libmemunreachable classifies mappings, for Linux:
//
//   - unreadable mappings, code, the kernel's ([vdso], [vvar]...) and
//     devices' (other than /dev/zero and /dev/shm) are skipped, and so
//     are mdtrace's own (p);
//   - [heap], the pages of live blocks in an anonymous mapping, and a heap
//     of glibc's other arenas (64 MiB aligned, the rest PROT_NONE) are
//     heap: not roots, only their blocks are read;
//   - the ranges the allocator mapped for itself are heap too (on
//     Android its mappings are named [anon:libc_malloc]);
//   - a mapping that holds a thread's stack pointer ([stack], or a
//     thread's anonymous stack) is a root from each such stack pointer,
//     less the red zone, to its end;
//   - every other readable mapping that is writable or anonymous is a
//     root: .data and .bss of every module, the threads' TLS (within their
//     stacks, or the loader's memory for the first thread), the memory
//     the program maps itself, stacks without a thread in them.
//
// Read-only file mappings are not roots: a module's read-only data
// (RELRO included) is made read-only before any of its code runs, so it
// holds no address of a block.
func Classify(maps []stacks.Mapping, sps []uint64, blocks []Block, p Known) *Layout {
	l := &Layout{}
	kinds := make([]kind, len(maps))
	for i := range maps {
		kinds[i] = classify(maps, i, p)
	}
	at := func(addr uint64) int {
		i := sort.Search(len(maps), func(i int) bool { return maps[i].End > addr })
		if i == len(maps) || maps[i].Start > addr {
			return -1
		}
		return i
	}
	// The pages of the blocks of an anonymous mapping are heap, the rest
	// of it globals: the kernel merges a chunk glibc maps for a large
	// block with the anonymous mappings next to it (the first thread's
	// TLS, the program's own), and other allocators' arenas are
	// anonymous mappings. In a process attached to late, the blocks
	// themselves, no more: the blocks from before beside them are roots.
	heapPages := map[int][]Range{}
	for i := range blocks {
		if m := at(blocks[i].Ptr); m >= 0 && kinds[m] == kindGlobals && (maps[m].Path == "" || maps[m].Name() == "[heap]") {
			b := &blocks[i]
			r := Range{max(maps[m].Start, (b.Ptr-min(b.Ptr, 16))&^(page-1)), min(maps[m].End, (b.Ptr+b.Size+page-1)&^(page-1))}
			if p.Late {
				r = Range{b.Ptr, min(maps[m].End, b.Ptr+b.Size)}
			}
			hp := heapPages[m]
			if n := len(hp); n > 0 && r.Start <= hp[n-1].End {
				hp[n-1].End = max(hp[n-1].End, r.End)
			} else {
				hp = append(hp, r)
			}
			heapPages[m] = hp
		}
	}
	// Stacks: from each stack pointer to the end of its mapping.
	stackOf := map[int]bool{}
	for _, sp := range sps {
		m := at(sp)
		if m < 0 || kinds[m] == kindSkip {
			continue
		}
		start := max(maps[m].Start, sp-min(sp, RedZone))
		l.Stacks = append(l.Stacks, Range{start, maps[m].End})
		stackOf[m] = true
	}
	for i := range maps {
		switch {
		case kinds[i] == kindStack && !stackOf[i]:
			// A stack no thread is on (a thread that exits): all
			// of it, as a global.
			fallthrough
		case kinds[i] == kindGlobals && !stackOf[i]:
			l.Globals = append(l.Globals, subtract([]Range{{maps[i].Start, maps[i].End}}, heapPages[i])...)
		}
	}
	if len(p.Allocator) > 0 {
		l.Globals = subtract(l.Globals, p.Allocator)
	}
	// Runs of blocks, within their mappings.
	var run Range
	runMap := -1
	for i := range blocks {
		b := &blocks[i]
		m := at(b.Ptr)
		if m < 0 || kinds[m] == kindSkip || b.Ptr+b.Size > maps[m].End {
			l.Outside++
			continue
		}
		start := max(maps[m].Start, b.Ptr-min(b.Ptr, 16))
		end := b.Ptr + b.Size
		if m == runMap && start <= run.End+runGap {
			run.End = max(run.End, end)
			continue
		}
		if runMap >= 0 {
			l.Runs = append(l.Runs, run)
		}
		run, runMap = Range{start, end}, m
	}
	if runMap >= 0 {
		l.Runs = append(l.Runs, run)
	}
	return l
}

type kind int

const (
	kindSkip kind = iota
	kindGlobals
	kindHeap
	kindStack
)

// classify gives mapping i its kind, before the blocks and stack pointers
// are looked at.
func classify(maps []stacks.Mapping, i int, p Known) kind {
	m := &maps[i]
	if !strings.HasPrefix(m.Perms, "r") || strings.Contains(m.Perms, "x") {
		return kindSkip
	}
	for _, a := range p.Addrs {
		if m.Start <= a && a < m.End {
			return kindSkip
		}
	}
	name := m.Name()
	switch {
	case p.Late && (name == "[heap]" || name == "" && glibcHeap(maps, i)):
		return kindGlobals
	case name == "[heap]":
		return kindHeap
	case name == "[stack]":
		return kindStack
	case strings.HasPrefix(name, "[v"): // [vdso], [vvar], [vsyscall], [vvar_vclock]
		return kindSkip
	case name == "" && glibcHeap(maps, i):
		return kindHeap
	case name == "" || strings.HasPrefix(name, "[anon"):
		return kindGlobals
	case p.File != nil && p.File(name):
		return kindSkip
	case strings.HasPrefix(name, "/dev/") && name != "/dev/zero" && !strings.HasPrefix(name, "/dev/shm/"):
		return kindSkip
	case strings.Contains(m.Perms, "w"):
		return kindGlobals
	}
	return kindSkip
}

// glibcHeap reports whether anonymous mapping i is a heap of one of
// glibc's arenas other than the main one: it starts at a multiple of
// HEAP_MAX_SIZE, and is either all of it or followed by the PROT_NONE
// rest of it.
func glibcHeap(maps []stacks.Mapping, i int) bool {
	m := &maps[i]
	if m.Start%glibcHeapMax != 0 || m.End-m.Start > glibcHeapMax {
		return false
	}
	if m.End-m.Start == glibcHeapMax {
		return true
	}
	if i+1 == len(maps) {
		return false
	}
	n := &maps[i+1]
	return n.Start == m.End && n.End == m.Start+glibcHeapMax && n.Path == "" && strings.HasPrefix(n.Perms, "---")
}

// subtract takes the sorted ranges out from the sorted ranges rs.
func subtract(rs, out []Range) []Range {
	var res []Range
	j := 0
	for _, r := range rs {
		for j < len(out) && out[j].End <= r.Start {
			j++
		}
		at := r.Start
		for k := j; k < len(out) && out[k].Start < r.End; k++ {
			if out[k].Start > at {
				res = append(res, Range{at, out[k].Start})
			}
			at = max(at, out[k].End)
		}
		if at < r.End {
			res = append(res, Range{at, r.End})
		}
	}
	return res
}
