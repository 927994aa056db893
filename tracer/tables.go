//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/bpf"
)

// The live table in tiers (bpf/mdtrace.bpf.c, the tables map). A BPF hash
// map takes 16 bytes of buckets for each entry of room as soon as it is
// made: one table of the default room of 4M blocks was 64 MiB of kernel
// memory and 40 ms of mdtrace's start, even for a program that never holds
// a thousand blocks. The first tier holds firstTier blocks. The next tier,
// four times larger (the last one takes what is left of --max-allocs), is
// made ahead of need and put in the tables map; once the tier in use is
// full, the probes move on to it (top_table) and say so (tier_moves), and
// the tier after it is made. No watch wakes mdtrace while the table fills
// (a check every 20 ms had cost 1% of a CPU while the traced process did
// nothing), and a burst of allocations has a whole tier of room while the
// next is made.
const (
	// tableTiers is the most tiers: TABLE_TIERS in bpf/mdtrace.bpf.c.
	tableTiers = 4
	// firstTier is the room of the first tier, 4 MiB of buckets.
	firstTier = 256 << 10
	// retryGrow is how long after a failure to make a tier it is tried
	// again.
	retryGrow = 100 * time.Millisecond
)

// tierSizes splits the room of the live table, total, into the rooms of its
// tiers: first, then four times the one before, the last tier taking what
// is left, so that they add up to total.
func tierSizes(total, first uint32) []uint32 {
	if first == 0 || first >= total {
		return []uint32{total}
	}
	var sizes []uint32
	left, size := total, first
	for len(sizes) < tableTiers-1 && size < left {
		sizes = append(sizes, size)
		left -= size
		if size > left/4 {
			size = left
		} else {
			size *= 4
		}
	}
	return append(sizes, left)
}

// liveTables is the tiers of the live table made so far. The first is the
// collection's allocs map; the others belong to liveTables.
type liveTables struct {
	outer *ebpf.Map       // the tables map: tier number -> map
	spec  *ebpf.MapSpec   // a tier, without its room
	top   *ebpf.Variable  // top_table, the tier in use
	moves *ringbuf.Reader // tier_moves: the probes moved on to a tier
	sizes []uint32        // the room of every tier, made or not

	mu     sync.Mutex
	tiers  []*ebpf.Map
	counts []tableCount
	err    error // the last failure to make a tier

	done chan struct{}
}

// newLiveTables takes the first tier, made with the collection, and, when
// there is room for more tiers, makes the next one in the background and
// then the one after each time the probes move on.
func newLiveTables(outer, first, moves *ebpf.Map, spec *ebpf.MapSpec, top *ebpf.Variable, sizes []uint32) (*liveTables, error) {
	t := &liveTables{outer: outer, spec: spec, top: top, sizes: sizes, tiers: []*ebpf.Map{first}}
	t.counts = make([]tableCount, 1, len(sizes))
	t.counts[0].calibrate(first)
	if len(sizes) > 1 {
		r, err := ringbuf.NewReader(moves)
		if err != nil {
			return nil, fmt.Errorf("reading the live table's tier moves: %w", err)
		}
		t.moves, t.done = r, make(chan struct{})
		go t.watch()
	}
	return t, nil
}

// watch makes the tier after the one in use, now and whenever the probes
// move on, until the last is made or close is called.
func (t *liveTables) watch() {
	defer close(t.done)
	for !t.grow() {
		// After a failure, try again a little later.
		if t.growErr() != nil {
			t.moves.SetDeadline(time.Now().Add(retryGrow))
		} else {
			t.moves.SetDeadline(time.Time{})
		}
		if _, err := t.moves.Read(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return // closed
		}
	}
}

// inUse returns the tier the probes put new blocks into.
func (t *liveTables) inUse() int {
	var top uint64
	if t.top.Get(&top) != nil || top >= uint64(len(t.tiers)) {
		return len(t.tiers) - 1
	}
	return int(top)
}

// grow makes the next tier when the tier in use is the newest. It returns
// true once every tier is made.
func (t *liveTables) grow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.tiers)
	if n == len(t.sizes) {
		return true
	}
	if t.inUse() < n-1 {
		return false // the next tier is ready
	}
	spec := t.spec.Copy()
	spec.Name = fmt.Sprintf("allocs%d", n)
	spec.MaxEntries = t.sizes[n]
	m, err := ebpf.NewMap(spec)
	var c tableCount
	if err == nil {
		// Measured before the probes can put blocks in it.
		c.calibrate(m)
		if err = t.outer.Put(uint32(n), m); err != nil {
			m.Close()
		}
	}
	if err != nil {
		// Tried again retryGrow later (watch); blocks the full tier
		// cannot take are counted (TableFull).
		t.err = fmt.Errorf("making tier %d of the live table (%d blocks): %w", n, t.sizes[n], err)
		return false
	}
	t.err = nil
	t.tiers = append(t.tiers, m)
	t.counts = append(t.counts, c)
	return n+1 == len(t.sizes)
}

// maps returns the tiers made so far, oldest first.
func (t *liveTables) maps() []*ebpf.Map {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*ebpf.Map(nil), t.tiers...)
}

// nonEmpty returns the tiers made so far, oldest first, but for those the
// kernel's count says are empty.
func (t *liveTables) nonEmpty() []*ebpf.Map {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*ebpf.Map
	for i, m := range t.tiers {
		if n, ok := t.counts[i].estimate(m); ok && n == 0 {
			continue
		}
		out = append(out, m)
	}
	return out
}

// estimate returns the number of blocks in all tiers, or false.
func (t *liveTables) estimate() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	total := 0
	for i, m := range t.tiers {
		n, ok := t.counts[i].estimate(m)
		if !ok {
			return 0, false
		}
		total += n
	}
	return total, true
}

// memlock returns the kernel's account of the memory of all tiers.
func (t *liveTables) memlock() (int64, error) {
	var total int64
	for _, m := range t.maps() {
		n, err := mapMemlock(m)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// growErr returns the last failure to make a tier, if the table has not
// grown since.
func (t *liveTables) growErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// close stops the watch and closes the tiers after the first, which the
// collection closes.
func (t *liveTables) close() {
	if t.moves != nil {
		t.moves.Close()
		<-t.done
		t.moves = nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.tiers[1:] {
		m.Close()
	}
	t.tiers = t.tiers[:1]
}

// room returns the room of the tiers made so far and of all of them.
func (t *liveTables) room() (made, total uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range t.sizes {
		if i < len(t.tiers) {
			made += uint64(s)
		}
		total += uint64(s)
	}
	return made, total
}

// TableRoom returns how many blocks the live table has room for now and
// at most (--max-allocs), and the last failure to add room, if any since.
func (p *Probes) TableRoom() (now, most uint64, err error) {
	now, most = p.tables.room()
	return now, most, p.tables.growErr()
}

// putBatch puts blocks into the tier in use and, when it is full, moves on
// to the next tier if it is made, as the probes do, and makes the tier
// after it, as the watch does when the probes move on: a move from user
// space sends no tier_moves event.
func (t *liveTables) putBatch(keys []bpf.MdtraceAllocKey, infos []bpf.MdtraceAllocInfo) error {
	for done := 0; done < len(keys); {
		t.mu.Lock()
		top := t.inUse()
		m := t.tiers[top]
		t.mu.Unlock()
		n, err := m.BatchUpdate(keys[done:], infos[done:], nil)
		done += n
		if errors.Is(err, unix.E2BIG) && t.moveOn(top) {
			t.grow()
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// moveOn makes the tier after top the one in use, if it is made.
func (t *liveTables) moveOn(top int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if top+1 >= len(t.tiers) {
		return false
	}
	// The probes may have moved on already: top_table only grows.
	if t.inUse() == top {
		if err := t.top.Set(uint64(top + 1)); err != nil {
			return false
		}
	}
	return true
}
