package unreach

import (
	"encoding/binary"
	"sort"
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
}

func newHeap(img *Image) *heap {
	h := &heap{img: img, seg: make([]int, len(img.Blocks)), mark: make([]bool, len(img.Blocks))}
	j := 0
	for i := range img.Blocks {
		b := &img.Blocks[i]
		for j < len(img.Heap) && img.Heap[j].End() <= b.Ptr {
			j++
		}
		h.seg[i] = -1
		if j < len(img.Heap) && img.Heap[j].Addr <= b.Ptr && b.Ptr+b.Size <= img.Heap[j].End() {
			h.seg[i] = j
		}
	}
	return h
}

// find returns the block v points into, or -1.
func (h *heap) find(v uint64) int {
	bs := h.img.Blocks
	i := sort.Search(len(bs), func(i int) bool { return bs[i].Ptr > v }) - 1
	if i < 0 || v >= bs[i].end() || v == bs[i].NotRef {
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
