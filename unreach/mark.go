package unreach

import (
	"encoding/binary"
)

// wordSize is the size of a pointer in the processes checked (LP64).
const wordSize = 8

// Block is a live block of the heap.
type Block struct {
	// Ptr and Size are the block's address and the size the program
	// asked for (a block of size 0 counts as one byte, as Android
	// tracks it).
	Ptr, Size uint64
	// NotRef, when not 0, is the one address inside the block that is
	// not a reference to it: glibc's address of the next chunk, which
	// starts in the last 8 bytes of a block whose size uses them, and
	// which the allocator's own bins and top pointer hold (see
	// GlibcNotRef).
	NotRef uint64
}

// end is the end of the addresses that point into b.
func (b *Block) end() uint64 { return b.Ptr + max(b.Size, 1) }

// Segment is a piece of the process's memory, copied while it was stopped.
type Segment struct {
	Addr uint64
	Data []byte
}

// End is the address just past the segment.
func (s *Segment) End() uint64 { return s.Addr + uint64(len(s.Data)) }

// Image is what the marking needs of a stopped process.
type Image struct {
	// Blocks are the live blocks, sorted by address, not overlapping.
	Blocks []Block
	// Heap are the copies of the blocks' memory, sorted by address; a
	// segment may hold several blocks.
	Heap []Segment
	// Roots are the memory ranges every word of which is a root: the
	// globals and the threads' stacks.
	Roots []Segment
	// Regs are the values of the threads' registers, roots too.
	Regs []uint64
}

// Result is the verdict on each block.
type Result struct {
	// Reachable[i] says whether Blocks[i] is reachable from the roots.
	Reachable []bool
	// Unread counts the blocks whose memory was not in Heap: their
	// references to other blocks are not known.
	Unread int
	// Edges are, for each unreachable block (by index), the unreachable
	// blocks it points into, for the folding of leaks.
	Edges map[int][]int
}

// heap finds blocks by address.
type heap struct {
	img  *Image
	seg  []int // index of the Heap segment that holds each block, -1 if none
	mark []bool
	// lo and hi bound the addresses inside blocks: most words are
	// not addresses of the heap, and are let go without a search.
	lo, hi uint64
	// regions index the blocks of the memory read by page; unread are
	// the blocks outside it, by address.
	regions []region
	unread  []int
}

// region is a range of the heap read, with the blocks in it indexed by
// page: a word that points into it is looked up among the blocks of its
// page rather than among them all, which costs a cache miss a step.
type region struct {
	start, end uint64
	// first[p] is the index of the first block that ends past the start
	// of page p of the region (one more than there are pages).
	first []int32
}

// regionGap is the largest gap between two pieces of the heap read that
// one region covers: its index costs 4 bytes a page.
const regionGap = 1 << 20

// pageShift is log2 of the size of a page of a region's index.
const pageShift = 12

func newHeap(img *Image) *heap {
	h := &heap{img: img, seg: make([]int, len(img.Blocks)), mark: make([]bool, len(img.Blocks))}
	bs := img.Blocks
	if len(bs) > 0 {
		h.lo = bs[0].Ptr
	}
	j := 0
	for i := range bs {
		b := &bs[i]
		h.hi = max(h.hi, b.end())
		for j < len(img.Heap) && img.Heap[j].End() <= b.Ptr {
			j++
		}
		h.seg[i] = -1
		if j < len(img.Heap) && img.Heap[j].Addr <= b.Ptr && b.Ptr+b.Size <= img.Heap[j].End() {
			h.seg[i] = j
		} else {
			h.unread = append(h.unread, i)
		}
	}
	for _, s := range img.Heap {
		if n := len(h.regions); n > 0 && s.Addr <= h.regions[n-1].end+regionGap {
			h.regions[n-1].end = max(h.regions[n-1].end, s.End())
			continue
		}
		h.regions = append(h.regions, region{start: s.Addr, end: s.End()})
	}
	i := 0
	for r := range h.regions {
		reg := &h.regions[r]
		pages := (reg.end - reg.start + 1<<pageShift - 1) >> pageShift
		reg.first = make([]int32, pages+1)
		for p := range reg.first {
			at := reg.start + uint64(p)<<pageShift
			for i < len(bs) && bs[i].end() <= at {
				i++
			}
			reg.first[p] = int32(i)
		}
	}
	return h
}

// find returns the block v points into, or -1.
func (h *heap) find(v uint64) int {
	if v < h.lo || v >= h.hi {
		return -1
	}
	rs := h.regions
	lo, hi := 0, len(rs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rs[m].start > v {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if r := lo - 1; r >= 0 && v < rs[r].end {
		// The block that holds v, if any, is among those from the
		// first that ends past its page's start to the first that
		// ends past the next page's start.
		reg := &rs[r]
		p := (v - reg.start) >> pageShift
		return h.holder(v, int(reg.first[p]), min(int(reg.first[p+1])+1, len(h.img.Blocks)))
	}
	return h.unreadHolder(v)
}

// holder returns the block that holds v among blocks [a, b) of the
// regions' blocks, or -1.
func (h *heap) holder(v uint64, a, b int) int {
	bs := h.img.Blocks
	// The last block that starts at or before v, by a binary search
	// written out: it runs for every word that may be an address.
	lo, hi := a, b
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bs[m].Ptr > v {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == a || v >= bs[lo-1].end() || v == bs[lo-1].NotRef {
		return -1
	}
	return lo - 1
}

// unreadHolder returns the block that holds v among the blocks not read,
// or -1.
func (h *heap) unreadHolder(v uint64) int {
	bs, idx := h.img.Blocks, h.unread
	lo, hi := 0, len(idx)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bs[idx[m]].Ptr > v {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo == 0 {
		return -1
	}
	i := idx[lo-1]
	if v >= bs[i].end() || v == bs[i].NotRef {
		return -1
	}
	return i
}

// data returns the memory of block i, nil if it was not read.
func (h *heap) data(i int) []byte {
	s := h.seg[i]
	if s < 0 {
		return nil
	}
	seg := &h.img.Heap[s]
	b := &h.img.Blocks[i]
	return seg.Data[b.Ptr-seg.Addr : b.Ptr-seg.Addr+b.Size]
}

// words calls fn with each aligned word of data, which starts at addr.
func words(addr uint64, data []byte, fn func(uint64)) {
	off := (wordSize - addr%wordSize) % wordSize
	for ; off+wordSize <= uint64(len(data)); off += wordSize {
		fn(binary.LittleEndian.Uint64(data[off:]))
	}
}

// Mark marks the blocks of img reachable from its roots.
func Mark(img *Image) *Result {
	h := newHeap(img)
	var stack []int
	visit := func(v uint64) {
		if i := h.find(v); i >= 0 && !h.mark[i] {
			h.mark[i] = true
			stack = append(stack, i)
		}
	}
	drain := func() {
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			words(img.Blocks[i].Ptr, h.data(i), visit)
		}
	}
	for _, v := range img.Regs {
		visit(v)
	}
	drain()
	for _, r := range img.Roots {
		words(r.Addr, r.Data, func(v uint64) {
			visit(v)
			drain()
		})
	}
	res := &Result{Reachable: h.mark, Edges: map[int][]int{}}
	for i := range img.Blocks {
		if h.seg[i] < 0 {
			res.Unread++
		}
		if h.mark[i] {
			continue
		}
		var out []int
		words(img.Blocks[i].Ptr, h.data(i), func(v uint64) {
			if j := h.find(v); j >= 0 && !h.mark[j] && (len(out) == 0 || out[len(out)-1] != j) {
				out = append(out, j)
			}
		})
		res.Edges[i] = out
	}
	return res
}

// GlibcNotRef returns the Block.NotRef of a block of glibc's allocator at
// ptr of size bytes, given the word before it (the chunk's size field),
// or 0. A chunk that glibc did not map by itself ends where the next one
// starts; the next chunk's first word is the block's last 8 usable bytes,
// so the next chunk's address lies inside a block of a size that uses
// them. glibc's bins and its top pointer hold that address when the next
// chunk is free: without this, they would keep the block reachable. The
// size field is checked against the size asked for, so that a word that
// is not glibc's header (another allocator) gives 0.
func GlibcNotRef(ptr, size, header uint64) uint64 {
	const isMmapped = 2
	cs := header &^ 7
	size = max(size, 1)
	if header&isMmapped != 0 || cs%16 != 0 || cs < 32 || cs < size+8 || cs-(size+8) >= 48 {
		return 0
	}
	if next := ptr + cs - 16; next < ptr+size {
		return next
	}
	return 0
}
