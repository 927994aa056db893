package leak

import (
	"cmp"
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
	byStack := map[uint64]*Site{}
	for i := range s.Allocs {
		a := &s.Allocs[i]
		site, ok := byStack[a.StackID]
		if !ok {
			site = &Site{StackID: a.StackID, Frames: s.Frames(a)}
			byStack[a.StackID] = site
		}
		site.Bytes += a.Size
		site.Blocks++
		total.Bytes += a.Size
		total.Blocks++
	}
	sites = make([]Site, 0, len(byStack))
	for _, site := range byStack {
		sites = append(sites, *site)
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
