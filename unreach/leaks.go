package unreach

import (
	"slices"
	"sort"
)

// ContentsLength is how many bytes of a leak's contents are kept, as
// libmemunreachable keeps them.
const ContentsLength = 32

// DefaultLimit is how many leaks libmemunreachable reports by default.
const DefaultLimit = 100

// Leak is one entry of libmemunreachable's report.
type Leak struct {
	Begin, Size                     uint64
	ReferencedCount, ReferencedSize uint64
	SimilarCount, SimilarSize       uint64
	// SimilarReferencedCount and SimilarReferencedSize are what the
	// similar leaks hold.
	SimilarReferencedCount, SimilarReferencedSize uint64
	// TotalSize is the leak's size, what it holds, and the same for its
	// similar leaks: the sort key.
	TotalSize uint64
	// Contents are the block's first bytes (up to ContentsLength).
	Contents []byte
	// Backtrace are the frames of the block's allocation, innermost
	// first, as the live table keeps them; nil if none.
	Backtrace []uint64
}

// Report is the outcome of a check, as libmemunreachable's
// UnreachableMemoryInfo.
type Report struct {
	NumAllocations, AllocationBytes uint64
	NumLeaks, LeakBytes             uint64
	Leaks                           []Leak
}

func sortFolded(f []Folded) {
	sort.Slice(f, func(i, j int) bool { return f[i].Index < f[j].Index })
}

// Summarize builds the report of a check: the folded leaks, in address
// order, are merged when they have the same backtrace (into the first,
// as libmemunreachable keys them by backtrace and keeps the first), sorted
// by total size (largest first, the earlier one first when equal) and cut
// at limit. backtrace returns the frames of block i (nil if none), data
// its memory (nil if not read).
func Summarize(img *Image, res *Result, folded []Folded, limit int, backtrace func(i int) []uint64, data func(i int) []byte) *Report {
	r := &Report{}
	for i := range img.Blocks {
		sz := max(img.Blocks[i].Size, 1)
		r.NumAllocations++
		r.AllocationBytes += sz
		if !res.Reachable[i] {
			r.NumLeaks++
			r.LeakBytes += sz
		}
	}
	type key string
	byTrace := map[key]int{}
	for _, f := range folded {
		b := &img.Blocks[f.Index]
		l := Leak{Begin: b.Ptr, Size: max(b.Size, 1), ReferencedCount: f.ReferencedCount, ReferencedSize: f.ReferencedSize}
		l.TotalSize = l.Size + l.ReferencedSize
		if d := data(f.Index); d != nil {
			l.Contents = slices.Clone(d[:min(len(d), ContentsLength)])
		}
		l.Backtrace = backtrace(f.Index)
		if len(l.Backtrace) > 0 {
			k := traceKey(l.Backtrace)
			if j, ok := byTrace[key(k)]; ok {
				e := &r.Leaks[j]
				e.SimilarCount++
				e.SimilarSize += l.Size
				e.SimilarReferencedCount += l.ReferencedCount
				e.SimilarReferencedSize += l.ReferencedSize
				e.TotalSize += l.TotalSize
				continue
			}
			byTrace[key(k)] = len(r.Leaks)
		}
		r.Leaks = append(r.Leaks, l)
	}
	sort.SliceStable(r.Leaks, func(i, j int) bool { return r.Leaks[i].TotalSize > r.Leaks[j].TotalSize })
	if limit >= 0 && len(r.Leaks) > limit {
		r.Leaks = r.Leaks[:limit]
	}
	return r
}

func traceKey(pcs []uint64) string {
	b := make([]byte, 0, 8*len(pcs))
	for _, pc := range pcs {
		for k := 0; k < 8; k++ {
			b = append(b, byte(pc>>(8*k)))
		}
	}
	return string(b)
}

// Data returns the memory of block i of img as the check read it, nil if
// it was not read.
func Data(img *Image, i int) []byte { return newHeapSeg(img, i) }

func newHeapSeg(img *Image, i int) []byte {
	b := &img.Blocks[i]
	j := sort.Search(len(img.Heap), func(j int) bool { return img.Heap[j].End() > b.Ptr })
	if j == len(img.Heap) || img.Heap[j].Addr > b.Ptr || b.Ptr+b.Size > img.Heap[j].End() {
		return nil
	}
	s := &img.Heap[j]
	return s.Data[b.Ptr-s.Addr : b.Ptr-s.Addr+b.Size]
}
