package unreach

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// fakeHeap lays blocks out at 0x10000, 0x20000, ... (64 bytes each unless
// told), with pointers written into them.
type fakeHeap struct {
	img   Image
	bytes map[int][]byte
}

const fakeBase = 0x10000

func newFake(n int, sizes ...uint64) *fakeHeap {
	f := &fakeHeap{bytes: map[int][]byte{}}
	for i := range n {
		size := uint64(64)
		if i < len(sizes) {
			size = sizes[i]
		}
		f.img.Blocks = append(f.img.Blocks, Block{Ptr: fakeBase * uint64(i+1), Size: size})
		f.bytes[i] = make([]byte, size)
	}
	return f
}

// ptr writes at offset off of block from the address of block to plus in.
func (f *fakeHeap) ptr(from int, off int, to int, in uint64) {
	binary.LittleEndian.PutUint64(f.bytes[from][off:], f.img.Blocks[to].Ptr+in)
}

// root adds a root segment at addr holding the words.
func (f *fakeHeap) root(addr uint64, words ...uint64) {
	b := make([]byte, 8*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	f.img.Roots = append(f.img.Roots, Segment{Addr: addr, Data: b})
}

func (f *fakeHeap) run() (*Result, []Folded) {
	f.img.Heap = nil
	for i := range f.img.Blocks {
		f.img.Heap = append(f.img.Heap, Segment{Addr: f.img.Blocks[i].Ptr, Data: f.bytes[i]})
	}
	res := Mark(&f.img)
	return res, Fold(&f.img, res)
}

func unreachable(res *Result) []int {
	var out []int
	for i, r := range res.Reachable {
		if !r {
			out = append(out, i)
		}
	}
	return out
}

func TestMark(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fakeHeap)
		want  []int
	}{
		{"nothing", func(f *fakeHeap) {}, []int{0, 1, 2, 3}},
		{"global", func(f *fakeHeap) { f.root(0x1000, 0, f.img.Blocks[1].Ptr, 7) }, []int{0, 2, 3}},
		{"register", func(f *fakeHeap) { f.img.Regs = []uint64{f.img.Blocks[3].Ptr} }, []int{0, 1, 2}},
		{"interior", func(f *fakeHeap) { f.root(0x1000, f.img.Blocks[2].Ptr+63) }, []int{0, 1, 3}},
		{"one past the end", func(f *fakeHeap) { f.root(0x1000, f.img.Blocks[2].Ptr+64) }, []int{0, 1, 2, 3}},
		{"chain", func(f *fakeHeap) {
			f.root(0x1000, f.img.Blocks[0].Ptr)
			f.ptr(0, 8, 1, 0)
			f.ptr(1, 56, 2, 10)
		}, []int{3}},
		{"chain held by an unreachable block", func(f *fakeHeap) {
			f.ptr(0, 8, 1, 0)
			f.ptr(1, 0, 2, 0)
		}, []int{0, 1, 2, 3}},
		{"cycle", func(f *fakeHeap) {
			f.ptr(0, 0, 1, 0)
			f.ptr(1, 0, 0, 0)
			f.root(0x1000, f.img.Blocks[3].Ptr)
		}, []int{0, 1, 2}},
		{"unaligned root word", func(f *fakeHeap) {
			// A root range that starts off a word boundary: its
			// words are read at aligned addresses only.
			b := make([]byte, 24)
			binary.LittleEndian.PutUint64(b[1:], f.img.Blocks[1].Ptr)  // at 0x1008
			binary.LittleEndian.PutUint64(b[12:], f.img.Blocks[2].Ptr) // at 0x1013
			f.img.Roots = append(f.img.Roots, Segment{Addr: 0x1007, Data: b})
		}, []int{0, 2, 3}},
		{"glibc's next chunk", func(f *fakeHeap) {
			// The address of the next chunk of a 24-byte block
			// (chunk of 32) is its byte 16: not a reference.
			f.img.Blocks[1].NotRef = f.img.Blocks[1].Ptr + 16
			f.root(0x1000, f.img.Blocks[1].Ptr+16, f.img.Blocks[2].Ptr+16)
		}, []int{0, 1, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(4)
			tc.setup(f)
			res, _ := f.run()
			if got := unreachable(res); !slices.Equal(got, tc.want) {
				t.Errorf("unreachable %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGlibcNotRef(t *testing.T) {
	for _, tc := range []struct{ size, header, want uint64 }{
		{24, 32 | 1, 0x1000 + 16},      // the last 8 bytes used: the next chunk starts inside
		{16, 32 | 1, 0},                // they are not
		{0, 32 | 1, 0},                 // malloc(0)
		{40, 48 | 5, 0x1000 + 32},      // another arena's chunk
		{24, 4096 | 2, 0},              // mmapped by glibc
		{24, 0x6162636465666768, 0},    // not a header
		{1000, 1008 | 1, 0x1000 + 992}, // 1000 > 992
	} {
		if got := GlibcNotRef(0x1000, tc.size, tc.header); got != tc.want {
			t.Errorf("GlibcNotRef(size %d, header %#x) = %#x, want %#x", tc.size, tc.header, got, tc.want)
		}
	}
}

// fold runs Fold on blocks 0..n-1 of 64 bytes with the edges given.
func fold(t *testing.T, n int, edges [][2]int, roots ...int) string {
	t.Helper()
	f := newFake(n)
	for _, e := range edges {
		// Each block has room for 8 pointers.
		off := 0
		for binary.LittleEndian.Uint64(f.bytes[e[0]][off:]) != 0 {
			off += 8
		}
		f.ptr(e[0], off, e[1], 0)
	}
	for _, r := range roots {
		f.img.Regs = append(f.img.Regs, f.img.Blocks[r].Ptr)
	}
	_, folded := f.run()
	var s string
	for _, l := range folded {
		s += fmt.Sprintf("%d:%d/%d ", l.Index, l.ReferencedCount, l.ReferencedSize)
	}
	return s
}

// TestFold has the cases of libmemunreachable's LeakFolding_test.
func TestFold(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		edges [][2]int
		want  string
	}{
		{"one", 1, nil, "0:0/0 "},
		{"two", 2, nil, "0:0/0 1:0/0 "},
		{"dominator", 2, [][2]int{{0, 1}}, "0:1/64 "},
		{"cycle", 3, [][2]int{{0, 1}, {1, 2}, {2, 0}}, "0:2/128 1:2/128 2:2/128 "},
		{"dominator cycle", 3, [][2]int{{0, 1}, {1, 2}, {2, 1}}, "0:2/128 "},
		{"two cycles", 6, [][2]int{{0, 1}, {1, 2}, {2, 0}, {3, 4}, {4, 5}, {5, 3}}, "0:2/128 1:2/128 2:2/128 3:2/128 4:2/128 5:2/128 "},
		{"two dominator cycles", 4, [][2]int{{0, 1}, {1, 0}, {2, 3}, {3, 2}}, "0:1/64 1:1/64 2:1/64 3:1/64 "},
		{"multipath", 4, [][2]int{{0, 1}, {0, 2}, {1, 3}, {2, 3}}, "0:3/192 "},
		{"multicycle", 4, [][2]int{{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 0}}, "0:3/192 1:3/192 2:3/192 3:3/192 "},
	} {
		if got := fold(t, tc.n, tc.edges); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// A giant cycle and a giant chain: no recursion.
	const n = 200000
	var cycle, chain [][2]int
	for i := range n {
		cycle = append(cycle, [2]int{i, (i + 1) % n})
		if i+1 < n {
			chain = append(chain, [2]int{i, i + 1})
		}
	}
	f := newFake(n)
	for _, e := range chain {
		f.ptr(e[0], 0, e[1], 0)
	}
	_, folded := f.run()
	if len(folded) != 1 || folded[0].Index != 0 || folded[0].ReferencedCount != n-1 || folded[0].ReferencedSize != 64*(n-1) {
		t.Errorf("giant chain: %d leaks, first %+v", len(folded), folded[0])
	}
	f = newFake(n)
	for _, e := range cycle {
		f.ptr(e[0], 0, e[1], 0)
	}
	_, folded = f.run()
	if len(folded) != n || folded[n-1].ReferencedCount != n-1 {
		t.Errorf("giant cycle: %d leaks, last %+v", len(folded), folded[len(folded)-1])
	}
	// Reachable blocks are not folded in.
	if got := fold(t, 3, [][2]int{{0, 1}, {1, 2}}, 1); got != "0:0/0 " {
		t.Errorf("dominator of a reachable block: %q", got)
	}
}

func TestSummarize(t *testing.T) {
	f := newFake(5, 64, 64, 100, 64, 10)
	f.ptr(0, 0, 1, 0) // 0 holds 1
	copy(f.bytes[4], "0123456789")
	res, folded := f.run()
	traces := map[int][]uint64{0: {1, 2}, 2: {3}, 3: {1, 2}}
	r := Summarize(&f.img, res, folded, DefaultLimit, func(i int) []uint64 { return traces[i] }, func(i int) []byte { return Data(&f.img, i) })
	if r.NumLeaks != 5 || r.LeakBytes != 302 || r.NumAllocations != 5 || r.AllocationBytes != 302 {
		t.Errorf("totals %+v", r)
	}
	// 0 (holding 1) and 3 merge: 64+64+64 = 192; then 2 (100), then 4 (10).
	if len(r.Leaks) != 3 {
		t.Fatalf("%d leaks: %+v", len(r.Leaks), r.Leaks)
	}
	l := r.Leaks[0]
	if l.Begin != 0x10000 || l.ReferencedCount != 1 || l.ReferencedSize != 64 || l.SimilarCount != 1 || l.SimilarSize != 64 || l.TotalSize != 192 {
		t.Errorf("first leak %+v", l)
	}
	if r.Leaks[1].Begin != 0x30000 || r.Leaks[2].Begin != 0x50000 || string(r.Leaks[2].Contents) != "0123456789" {
		t.Errorf("leaks %+v", r.Leaks)
	}
	if r := Summarize(&f.img, res, folded, 1, func(i int) []uint64 { return traces[i] }, func(int) []byte { return nil }); len(r.Leaks) != 1 {
		t.Errorf("limit 1: %d leaks", len(r.Leaks))
	}
}

// TestFindIndexed: the lookup by page of the regions read finds the block
// that holds each address as a search of every block does, for blocks in
// the memory read, outside it, across a region's end, and of size 0.
func TestFindIndexed(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for round := range 50 {
		img := &Image{}
		addr := uint64(0x10000 + rng.Intn(4096))
		for range 200 {
			size := uint64(rng.Intn(3 * 4096))
			if rng.Intn(10) == 0 {
				size = 0
			}
			img.Blocks = append(img.Blocks, Block{Ptr: addr, Size: size})
			addr += max(size, 1) + uint64(rng.Intn(64))
			if rng.Intn(20) == 0 {
				addr += uint64(rng.Intn(4 << 20))
			}
		}
		// Pieces of memory read: runs of blocks, some left out, some
		// cut short inside a block.
		for i := 0; i < len(img.Blocks); {
			j := i + 1 + rng.Intn(10)
			j = min(j, len(img.Blocks))
			if rng.Intn(4) > 0 {
				start, end := img.Blocks[i].Ptr-16, img.Blocks[j-1].end()
				if rng.Intn(5) == 0 {
					end -= uint64(rng.Intn(int(img.Blocks[j-1].end() - img.Blocks[j-1].Ptr)))
				}
				img.Heap = append(img.Heap, Segment{Addr: start, Data: make([]byte, end-start)})
			}
			i = j
		}
		h := newHeap(img)
		naive := func(v uint64) int {
			for i := range img.Blocks {
				if b := &img.Blocks[i]; b.Ptr <= v && v < b.end() {
					return i
				}
			}
			return -1
		}
		for range 2000 {
			v := img.Blocks[0].Ptr - 100 + uint64(rng.Int63n(int64(addr-img.Blocks[0].Ptr+200)))
			if got, want := h.find(v), naive(v); got != want {
				t.Fatalf("round %d: find(%#x) = %d, want %d", round, v, got, want)
			}
		}
		for i := range img.Blocks {
			b := &img.Blocks[i]
			for _, v := range []uint64{b.Ptr, b.end() - 1, b.end()} {
				if got, want := h.find(v), naive(v); got != want {
					t.Fatalf("round %d: find(%#x) = %d, want %d (block %d at %#x, %d bytes)", round, v, got, want, i, b.Ptr, b.Size)
				}
			}
		}
	}
}
