package leak

import (
	"cmp"
	"math"
	"slices"
)

// Site is an allocation site: one backtrace, and the live blocks allocated
// there.
type Site struct {
	// StackID and Frames are the backtrace; 0 and nil for the blocks
	// allocated without one, which count as one site.
	StackID uint64
	Frames  []uint64
	Bytes   uint64
	Blocks  uint64
}

// Sites returns the allocation sites, those with the most live bytes first
// (then the most blocks, then the lower stack id), and the totals of the
// whole table.
func (s *Snapshot) Sites() (sites []Site, total Site) {
	// Sampled, each allocation stands for Weight of its size: the sums
	// are estimates, rounded once they are made.
	type sums struct {
		site          *Site
		bytes, blocks float64
	}
	byStack := map[uint64]*sums{}
	for i := range s.Allocs {
		a := &s.Allocs[i]
		sum, ok := byStack[a.StackID]
		if !ok {
			sum = &sums{site: &Site{StackID: a.StackID, Frames: s.Frames(a)}}
			byStack[a.StackID] = sum
		}
		w := s.Weight(a.Size)
		sum.bytes += float64(a.Size) * w
		sum.blocks += w
	}
	sites = make([]Site, 0, len(byStack))
	for _, sum := range byStack {
		site := *sum.site
		site.Bytes, site.Blocks = uint64(math.Round(sum.bytes)), uint64(math.Round(sum.blocks))
		total.Bytes += site.Bytes
		total.Blocks += site.Blocks
		sites = append(sites, site)
	}
	slices.SortFunc(sites, func(a, b Site) int {
		if c := cmp.Compare(b.Bytes, a.Bytes); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Blocks, a.Blocks); c != 0 {
			return c
		}
		return cmp.Compare(a.StackID, b.StackID)
	})
	return sites, total
}
