package unreach

import (
	"encoding/binary"
	"math/rand"
	"testing"
	"time"
)

// benchHeapBytes is the heap BenchmarkScan marks: large enough that the
// figure per GB is the marking's, not its fixed costs'.
const benchHeapBytes = 256 << 20

// benchImage is a heap of blocks of 32 to 2048 bytes, laid out as glibc
// lays them (each after a 16-byte header), one word in eight a pointer
// into another block and the rest small numbers, as in a program's data;
// the roots hold one block in sixteen, and a tenth of the blocks point
// nowhere the roots reach.
func benchImage() *Image {
	rng := rand.New(rand.NewSource(1))
	const base = 0x5555_0000_0000
	img := &Image{}
	addr := uint64(base + 16)
	for addr-base < benchHeapBytes {
		size := uint64(32 << rng.Intn(7))
		img.Blocks = append(img.Blocks, Block{Ptr: addr, Size: size})
		addr += size + 16
	}
	data := make([]byte, addr-base)
	for i := range img.Blocks {
		b := &img.Blocks[i]
		off := b.Ptr - base
		for w := uint64(0); w < b.Size; w += wordSize {
			v := uint64(rng.Intn(1 << 16))
			if rng.Intn(8) == 0 {
				t := &img.Blocks[rng.Intn(len(img.Blocks))]
				v = t.Ptr + uint64(rng.Intn(int(t.Size)))&^7
			}
			binary.LittleEndian.PutUint64(data[off+w:], v)
		}
	}
	img.Heap = []Segment{{Addr: base, Data: data}}
	roots := make([]byte, 0, len(img.Blocks)/2)
	for i := 0; i < len(img.Blocks); i += 16 {
		roots = binary.LittleEndian.AppendUint64(roots, img.Blocks[i].Ptr)
	}
	img.Roots = []Segment{{Addr: 0x7fff_0000_0000, Data: roots}}
	return img
}

// BenchmarkScan: the marking, the folding of the leaks and their report,
// in seconds per GB of heap (the copy of the process's memory it works on
// is tracer's BenchmarkReadRanges).
func BenchmarkScan(b *testing.B) {
	img := benchImage()
	b.ResetTimer()
	var took time.Duration
	var leaks int
	for range b.N {
		start := time.Now()
		res := Mark(img)
		folded := Fold(img, res)
		r := Summarize(img, res, folded, DefaultLimit, func(int) []uint64 { return nil }, func(i int) []byte { return Data(img, i) })
		took += time.Since(start)
		leaks = int(r.NumLeaks)
	}
	gb := float64(benchHeapBytes) / (1 << 30)
	b.ReportMetric(took.Seconds()/float64(b.N)/gb, "s/GB")
	b.ReportMetric(float64(len(img.Blocks)), "blocks")
	b.ReportMetric(float64(leaks), "leaks")
}
