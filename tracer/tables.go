//go:build linux

package tracer

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// The live table (bpf/table.h, the tables map) is up to four tiers,
// each an array of buckets of 16 slots that mdtrace maps into its memory. A
// block has two buckets in a tier, picked by hashing its address and
// process, and goes into the emptier one; the tier in use takes blocks until
// both buckets of one are full, at 85-90% of its slots. A slot is 32 bytes:
// at that fill a block costs 36 to 40 bytes of kernel memory, where an
// entry of a BPF hash map cost 108 and 16 bytes of buckets per block of
// room. An array is all made at once, so the tiers grow: the first has
// room for firstTier blocks, each next one four times as many (the last
// takes what is left of --max-allocs). When the probes find the tier in use
// getting full (fillingAt), they say so (tier_moves) and the next tier is
// made and put in the tables map, ahead of need; when the tier in use is
// full, the probes move on to it (top_table). No watch wakes mdtrace while
// the table fills (a check every 20 ms had cost 1% of a CPU while the
// traced process did nothing), and the rest of the tier in use is the room
// for a burst of allocations while the next is made.
// The most tiers, the slots of a bucket and the pointer of a slot being
// filled in or emptied are abi.TableTiers, abi.BucketSlots and abi.SlotBusy.
//
// A walk of the whole table (a snapshot, a zygote child's copy of its
// parent's blocks, the drop of a process's blocks) would read every
// bucket of every tier made, 3 MB for the first tier alone, however few
// blocks it holds: half a millisecond for each process that exits. The
// occupancy bitmap (table_occ, abi.OccBits bits for each tier) has a bit
// for each run of buckets that may hold an entry (abi.OccBit): the probes
// and put set it after they take a slot, and a walk reads only the runs
// whose bit is set and clears the bits of those it finds empty (each).
const (
	// firstTier is the room of the first tier, 2.5 MB of slots.
	firstTier = 64 << 10
	// retryGrow is how long after a failure to make a tier it is tried
	// again.
	retryGrow = 100 * time.Millisecond
)

// bucketBytes is the size of a bucket.
const bucketBytes = int(unsafe.Sizeof(bpf.MdtraceBucket{}))

// tierSizes splits the room of the live table, total, into the rooms of its
// tiers: first, then four times the one before, the last tier taking what
// is left, so that they add up to total.
func tierSizes(total, first uint32) []uint32 {
	if first == 0 || first >= total {
		return []uint32{total}
	}
	var sizes []uint32
	left, size := total, first
	for len(sizes) < abi.TableTiers-1 && size < left {
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

// tierBuckets returns the buckets of a tier with room for room blocks: a
// fifth more slots than blocks, as a tier is full before every slot is
// used. Two at least, as a block has two buckets.
func tierBuckets(room uint32) uint32 {
	return uint32(max((uint64(room)*6/5+abi.BucketSlots-1)/abi.BucketSlots, 2))
}

// fillingAt returns how many slots of the emptier bucket of a block say
// that a tier of n buckets is getting full (tier_filling_at): 10 when
// about half its slots are used, 13 when two thirds are. A tier is full at
// 85-90%: a large tier keeps a fifth of its slots, room for 128K blocks or
// more, for the allocations made while the next tier is made (10-20 ms,
// most of it the RCU grace period an update of the tables map waits for),
// and a small one keeps a third.
func fillingAt(n uint32) uint32 {
	if uint64(n)*abi.BucketSlots/5 >= 128<<10 {
		return 13
	}
	return 10
}

// bucketsOf returns the two buckets of key in a tier of n buckets, as
// buckets_of in bpf/table.h.
func bucketsOf(key *bpf.MdtraceAllocKey, n uint32) (uint32, uint32) {
	return abi.TableBuckets(key.Ptr, key.Tgid, n)
}

// tier is one tier of the live table, mapped into mdtrace's memory.
type tier struct {
	m       *ebpf.Map
	mem     []byte
	buckets uint32
	// occ is the tier's words of the occupancy bitmap, mapped into
	// mdtrace's memory, and mult its multiplier (abi.OccMult).
	occ  []uint64
	mult uint64
	// clearing is held alone by the walk that clears the bits of empty
	// runs, and shared by the walks that only read them (each).
	clearing sync.RWMutex
	// puts is the blocks user space put in (copies of a zygote's parent's)
	// less those it took out (dropped processes and programs): the probes
	// count theirs in tier_blocks.
	puts atomic.Int64
}

// newTier maps tier m, of n buckets, into memory; occ is its words of the
// occupancy bitmap.
func newTier(m *ebpf.Map, n uint32, occ []uint64) (*tier, error) {
	page := os.Getpagesize()
	size := (int(n)*bucketBytes + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping a tier of the live table: %w", err)
	}
	return &tier{m: m, mem: mem, buckets: n, occ: occ, mult: abi.OccMult(n)}, nil
}

// mapOcc maps the occupancy bitmap, table_occ, into memory: its words,
// abi.OccWords for each tier, and the mapping to unmap.
func mapOcc(m *ebpf.Map) ([]uint64, []byte, error) {
	page := os.Getpagesize()
	size := (abi.TableTiers*abi.OccWords*8 + page - 1) &^ (page - 1)
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mapping the live table's occupancy bitmap: %w", err)
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), abi.TableTiers*abi.OccWords), mem, nil
}

// tierOcc returns the words of tier i in the occupancy bitmap.
func tierOcc(occ []uint64, i int) []uint64 {
	return occ[i*abi.OccWords : (i+1)*abi.OccWords : (i+1)*abi.OccWords]
}

// firstOf returns the first bucket of the run of the occupancy bit bit,
// or the tier's buckets when no bucket has that bit or a later one: the
// least b with abi.OccBit(b, t.mult) >= bit, as OccBit grows with b.
func (t *tier) firstOf(bit uint32) uint32 {
	b := (uint64(bit)<<32 + t.mult - 1) / t.mult
	return uint32(min(b, uint64(t.buckets)))
}

// mark sets the occupancy bit of bucket b after a slot of it was taken,
// as occ_mark in bpf/table.h does.
func (t *tier) mark(b uint32) {
	bit := abi.OccBit(b, t.mult)
	w, m := &t.occ[bit/64], uint64(1)<<(bit%64)
	if atomic.LoadUint64(w)&m == 0 {
		atomic.OrUint64(w, m)
	}
}

// runEmpty reports whether buckets lo to hi (not included) have every
// slot free: a slot being filled in or emptied (abi.SlotBusy) is used.
func (t *tier) runEmpty(lo, hi uint32) bool {
	for i := lo; i < hi; i++ {
		bk := t.bucket(i)
		for j := range abi.BucketSlots {
			if atomic.LoadUint64(&bk.Ptr[j]) != 0 {
				return false
			}
		}
	}
	return true
}

// clear clears occupancy bit bit, whose run, buckets lo to hi (not
// included), a walk found empty. A probe or put that takes a slot of the
// run does so by a compare-and-swap, then loads the bit's word and sets
// the bit if it is clear. Here the bit is cleared by an atomic, and the
// run's slots read again after it: Go's atomics and the probes'
// compare-and-swap are each a full barrier, so either the slot was taken
// before the read again, which sees it and sets the bit back, or after
// the bit was cleared, and the taker's load sees it clear and sets it. A
// slot taken is never left under a clear bit.
func (t *tier) clear(bit, lo, hi uint32) {
	if clearHook != nil {
		clearHook(t, bit, false)
	}
	w, m := &t.occ[bit/64], uint64(1)<<(bit%64)
	atomic.AndUint64(w, ^m)
	if clearHook != nil {
		clearHook(t, bit, true)
	}
	if !t.runEmpty(lo, hi) {
		atomic.OrUint64(w, m)
	}
}

// clearHook, when set by a test, is called by clear with the bit
// of a run found empty, before the bit is cleared and after (cleared
// true): what it puts into the run then is what a put or a probe racing
// the walk would.
var clearHook func(t *tier, bit uint32, cleared bool)

// bucket returns bucket i of the tier.
func (t *tier) bucket(i uint32) *bpf.MdtraceBucket {
	return (*bpf.MdtraceBucket)(unsafe.Pointer(&t.mem[int(i)*bucketBytes]))
}

// each calls fn with every entry of the tier. It reads the runs of
// buckets whose occupancy bit is set, and, after fn has seen a run's
// entries (and maybe taken them out), clears the bit of a run it found
// empty (clear). A bit cleared as a slot of its run is taken is set back
// at once, but another walk reading the bit in between would pass over an
// entry that was there all along: one walk clears bits at a time, and no
// other walk of the tier runs meanwhile; when walks overlap, the others
// only read. An entry being written or emptied while it is read is passed
// over. fn must not keep its arguments, nor walk the table.
func (t *tier) each(fn func(*bpf.MdtraceAllocKey, *bpf.MdtraceAllocInfo, *bpf.MdtraceBucket, int)) {
	clearing := t.clearing.TryLock()
	if clearing {
		defer t.clearing.Unlock()
	} else {
		t.clearing.RLock()
		defer t.clearing.RUnlock()
	}
	// One key and one entry for the whole walk: fn's arguments escape.
	var (
		key  bpf.MdtraceAllocKey
		info bpf.MdtraceAllocInfo
	)
	for w := range t.occ {
		word := atomic.LoadUint64(&t.occ[w])
		for word != 0 {
			bit := uint32(w*64 + bits.TrailingZeros64(word))
			word &= word - 1
			lo, hi := t.firstOf(bit), t.firstOf(bit+1)
			// Whether a slot of the run was in use once fn had
			// seen it, which may have taken it out.
			held := false
			for i := lo; i < hi; i++ {
				bk := t.bucket(i)
				for j := range abi.BucketSlots {
					p := atomic.LoadUint64(&bk.Ptr[j])
					if p == 0 {
						continue
					}
					if p == abi.SlotBusy {
						held = true
						continue
					}
					key = bpf.MdtraceAllocKey{Tgid: bk.Tgid[j], Gen: bk.Gen[j], Ptr: p}
					info = bk.Info[j]
					if key.Tgid != 0 && atomic.LoadUint64(&bk.Ptr[j]) == p {
						fn(&key, &info, bk, j)
					}
					held = held || atomic.LoadUint64(&bk.Ptr[j]) != 0
				}
			}
			if clearing && !held {
				t.clear(bit, lo, hi)
			}
		}
	}
}

// takeOut empties slot j of bk, which held key, as take_out in
// bpf/table.h. False when the probes emptied it first.
func (t *tier) takeOut(bk *bpf.MdtraceBucket, j int, key *bpf.MdtraceAllocKey) bool {
	if !atomic.CompareAndSwapUint64(&bk.Ptr[j], key.Ptr, abi.SlotBusy) {
		return false
	}
	atomic.StoreUint32(&bk.Tgid[j], 0)
	atomic.StoreUint64(&bk.Ptr[j], 0)
	t.puts.Add(-1)
	return true
}

// put puts a new entry into the emptier of its two buckets, as place in
// bpf/table.h. It returns false when both are full, and whether the
// emptier one holds fillingAt slots or more.
func (t *tier) put(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) (ok, filling bool) {
	b0, b1 := bucketsOf(key, t.buckets)
	bs := [2]uint32{b0, b1}
	bks := [2]*bpf.MdtraceBucket{t.bucket(b0), t.bucket(b1)}
	used := usedSlots(bks[0])
	if u := usedSlots(bks[1]); u < used {
		bks[0], bks[1], used = bks[1], bks[0], u
		bs[0], bs[1] = bs[1], bs[0]
	}
	filling = used >= int(fillingAt(t.buckets))
	for i, bk := range bks {
		for j := range abi.BucketSlots {
			if atomic.LoadUint64(&bk.Ptr[j]) != 0 || !atomic.CompareAndSwapUint64(&bk.Ptr[j], 0, abi.SlotBusy) {
				continue
			}
			atomic.StoreUint32(&bk.Tgid[j], key.Tgid)
			atomic.StoreUint32(&bk.Gen[j], key.Gen)
			bk.Info[j] = *info
			atomic.StoreUint64(&bk.Ptr[j], key.Ptr)
			// After the compare-and-swap, as the probes do (clear).
			t.mark(bs[i])
			t.puts.Add(1)
			return true, filling
		}
	}
	return false, filling
}

// putAll puts blocks into the tier until one finds both its buckets full
// (full), or, with stopFilling, until the tier gets full enough to make
// the next one (the probes need that one before this one is full). It
// returns how many went in, and whether the tier got full enough.
func (t *tier) putAll(keys []bpf.MdtraceAllocKey, infos []bpf.MdtraceAllocInfo, stopFilling bool) (n int, filling, full bool) {
	for i := range keys {
		ok, f := t.put(&keys[i], &infos[i])
		filling = filling || f
		if !ok {
			return i, filling, true
		}
		if f && stopFilling {
			return i + 1, true, false
		}
	}
	return len(keys), filling, false
}

// usedSlots counts the slots of bk in use.
func usedSlots(bk *bpf.MdtraceBucket) int {
	n := 0
	for j := range abi.BucketSlots {
		if atomic.LoadUint64(&bk.Ptr[j]) != 0 {
			n++
		}
	}
	return n
}

// close unmaps the tier, and closes its map if it is not the collection's.
func (t *tier) close(own bool) {
	unix.Munmap(t.mem)
	t.mem = nil
	if own {
		t.m.Close()
	}
}

// liveTables is the tiers of the live table made so far. The first is the
// collection's allocs map; the others belong to liveTables.
type liveTables struct {
	outer   *ebpf.Map       // the tables map: tier number -> map
	spec    *ebpf.MapSpec   // a tier, without its room
	top     *ebpf.Variable  // top_table, the tier in use
	filling *ebpf.Variable  // tier_filling, a bit per tier getting full
	buckets *ebpf.Variable  // tier_buckets, the buckets of each tier
	at      *ebpf.Variable  // tier_filling_at, when each tier gets full
	mult    *ebpf.Variable  // tier_occ_mult, the multiplier of each tier's occupancy bits
	blocks  *ebpf.Map       // tier_blocks, the probes' count of each tier's blocks
	occ     []uint64        // table_occ, the occupancy bitmap, mapped
	occMem  []byte          // the mapping of table_occ
	moves   *ringbuf.Reader // tier_moves: a tier getting full, or moved on to
	sizes   []uint32        // the room of every tier, made or not

	// mem is held, shared, while the tiers' memory is read or written,
	// and by close, alone, to unmap it: a walk in flight when the probes
	// are closed ends before its memory goes.
	mem sync.RWMutex

	mu    sync.Mutex
	tiers []*tier
	full  uint64 // tiers user space found getting full, a bit each
	err   error  // the last failure to make a tier

	done chan struct{}
}

// tableObjects is what liveTables needs of the collection.
type tableObjects struct {
	outer, first, moves, blocks, occ *ebpf.Map
	top, filling, buckets, at, mult  *ebpf.Variable
}

// tierVars returns tier_buckets, tier_filling_at and tier_occ_mult for
// tiers of the given numbers of buckets.
func tierVars(buckets ...uint32) (n, at [abi.TableTiers]uint32, mult [abi.TableTiers]uint64) {
	for i, b := range buckets {
		n[i], at[i], mult[i] = b, fillingAt(b), abi.OccMult(b)
	}
	return n, at, mult
}

// newLiveTables takes the first tier, made with the collection, of
// tierBuckets(sizes[0]) buckets (the collection's tier_buckets,
// tier_filling_at and tier_occ_mult say so already), and, when there is
// room for more tiers, makes the next one each time the probes find the
// one in use getting full.
func newLiveTables(o tableObjects, spec *ebpf.MapSpec, sizes []uint32) (*liveTables, error) {
	t := &liveTables{outer: o.outer, spec: spec, top: o.top, filling: o.filling, buckets: o.buckets,
		at: o.at, mult: o.mult, blocks: o.blocks, sizes: sizes}
	var err error
	if t.occ, t.occMem, err = mapOcc(o.occ); err != nil {
		return nil, err
	}
	first, err := newTier(o.first, tierBuckets(sizes[0]), tierOcc(t.occ, 0))
	if err != nil {
		unix.Munmap(t.occMem)
		return nil, err
	}
	t.tiers = []*tier{first}
	if len(sizes) > 1 {
		r, err := ringbuf.NewReader(o.moves)
		if err != nil {
			first.close(false)
			unix.Munmap(t.occMem)
			return nil, fmt.Errorf("reading the live table's tier events: %w", err)
		}
		t.moves, t.done = r, make(chan struct{})
		go t.watch()
	}
	return t, nil
}

// watch makes the tier after the one in use when the probes find it getting
// full or move on, until the last is made or close is called.
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

// getsFull reports whether tier i was found getting full.
func (t *liveTables) getsFull(i int) bool {
	var bits uint64
	if t.filling.Get(&bits) != nil {
		bits = ^uint64(0) // make the next tier rather than lose blocks
	}
	return (bits|t.full)&(1<<i) != 0
}

// grow makes the next tier when the tier in use is the newest and getting
// full. It returns true once every tier is made.
func (t *liveTables) grow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.tiers)
	if n == len(t.sizes) {
		return true
	}
	if top := t.inUse(); top < n-1 || !t.getsFull(top) {
		return false // the next tier is ready, or not needed yet
	}
	spec := t.spec.Copy()
	spec.Name = fmt.Sprintf("allocs%d", n)
	spec.MaxEntries = tierBuckets(t.sizes[n])
	m, err := ebpf.NewMap(spec)
	var tr *tier
	if err == nil {
		if tr, err = newTier(m, spec.MaxEntries, tierOcc(t.occ, n)); err != nil {
			m.Close()
		}
	}
	if err == nil {
		// The probes read a tier's buckets once it is in tables.
		var buckets []uint32
		for _, made := range t.tiers {
			buckets = append(buckets, made.buckets)
		}
		nb, at, mult := tierVars(append(buckets, spec.MaxEntries)...)
		if err = t.buckets.Set(nb); err == nil {
			if err = t.at.Set(at); err == nil {
				if err = t.mult.Set(mult); err == nil {
					err = t.outer.Put(uint32(n), m)
				}
			}
		}
		if err != nil {
			tr.close(true)
		}
	}
	if err != nil {
		// Tried again retryGrow later (watch); blocks the full tier
		// cannot take are counted (TableFull).
		t.err = fmt.Errorf("making tier %d of the live table (%d blocks): %w", n, t.sizes[n], err)
		return false
	}
	t.err = nil
	t.tiers = append(t.tiers, tr)
	return n+1 == len(t.sizes)
}

// made returns the tiers made so far, oldest first.
func (t *liveTables) made() []*tier {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*tier(nil), t.tiers...)
}

// maps returns the maps of the tiers made so far, oldest first.
func (t *liveTables) maps() []*ebpf.Map {
	var ms []*ebpf.Map
	for _, tr := range t.made() {
		ms = append(ms, tr.m)
	}
	return ms
}

// counts returns the blocks in each tier made so far, oldest first.
func (t *liveTables) counts() ([]int64, error) {
	tiers := t.made()
	out := make([]int64, len(tiers))
	var perCPU []int64
	for i, tr := range tiers {
		if err := t.blocks.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("reading the live table's counts: %w", err)
		}
		out[i] = tr.puts.Load()
		for _, n := range perCPU {
			out[i] += n
		}
	}
	return out, nil
}

// nonEmpty returns the tiers made so far, oldest first, but for those the
// counts say are empty.
func (t *liveTables) nonEmpty() []*tier {
	tiers := t.made()
	counts, err := t.counts()
	if err != nil {
		return tiers
	}
	var out []*tier
	for i, tr := range tiers {
		if i < len(counts) && counts[i] == 0 {
			continue
		}
		out = append(out, tr)
	}
	return out
}

// estimate returns the number of blocks in all tiers, or false.
func (t *liveTables) estimate() (int, bool) {
	counts, err := t.counts()
	if err != nil {
		return 0, false
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	return int(max(total, 0)), true
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

// close stops the watch, unmaps the tiers and closes those after the
// first, which the collection closes.
func (t *liveTables) close() {
	if t.moves != nil {
		t.moves.Close()
		<-t.done
		t.moves = nil
	}
	t.mem.Lock()
	defer t.mem.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, tr := range t.tiers {
		tr.close(i > 0)
	}
	t.tiers = nil
	if t.occMem != nil {
		unix.Munmap(t.occMem)
		t.occ, t.occMem = nil, nil
	}
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
// to the next tier if it is made, as the probes do; the next tier is made
// when the tier in use gets full, as it is when the probes find it so. The
// tier in use is looked up once per tier, not per block: a zygote fork of
// a process with a million blocks copies them in 0.34-0.36 s against
// 0.40-0.51 s.
func (t *liveTables) putBatch(keys []bpf.MdtraceAllocKey, infos []bpf.MdtraceAllocInfo) error {
	t.mem.RLock()
	defer t.mem.RUnlock()
	for i := 0; i < len(keys); {
		t.mu.Lock()
		if len(t.tiers) == 0 {
			t.mu.Unlock()
			return errors.New("the live table is closed")
		}
		top := t.inUse()
		tr := t.tiers[top]
		marked := t.full&(1<<top) != 0
		t.mu.Unlock()
		n, filling, full := tr.putAll(keys[i:], infos[i:], !marked)
		i += n
		if filling {
			t.markFull(top)
		}
		if !full {
			continue
		}
		if !t.moveOn(top) {
			return fmt.Errorf("the live table is full: %d of %d blocks not copied", len(keys)-i, len(keys))
		}
		t.grow()
	}
	return nil
}

// markFull notes that tier i is getting full and makes the next tier if
// it is not made yet.
func (t *liveTables) markFull(i int) {
	t.mu.Lock()
	seen := t.full&(1<<i) != 0
	t.full |= 1 << i
	t.mu.Unlock()
	if !seen {
		t.grow()
	}
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

// mapMemlock returns the memory the kernel reports for map m.
func mapMemlock(m *ebpf.Map) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, err
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("memlock:")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no memlock in the fdinfo of map %v", m)
}
