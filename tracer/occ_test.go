//go:build linux

package tracer

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// occState is what the occupancy bitmap says of the live table's tiers:
// the bits set, the runs of buckets that hold an entry (or a slot being
// filled in or emptied), and those of them whose bit is clear, which no
// walk would read.
type occState struct {
	set, held, hidden int
}

// occupancy reads the bitmap and every bucket of the tiers made.
func occupancy(t *testing.T, p *Probes) occState {
	t.Helper()
	var s occState
	for _, tr := range p.tables.made() {
		for w := range tr.occ {
			s.set += bits.OnesCount64(atomic.LoadUint64(&tr.occ[w]))
		}
		for bit := uint32(0); bit < abi.OccBits; bit++ {
			lo, hi := tr.firstOf(bit), tr.firstOf(bit+1)
			if tr.runEmpty(lo, hi) {
				continue
			}
			s.held++
			if atomic.LoadUint64(&tr.occ[bit/64])&(1<<(bit%64)) == 0 {
				s.hidden++
			}
		}
	}
	return s
}

// countTgid counts the blocks of process tgid a walk of the live table
// sees, by gen.
func countTgid(t *testing.T, p *Probes, tgid uint32) map[uint32]int {
	t.Helper()
	n := map[uint32]int{}
	err := p.eachAlloc(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo) {
		if k.Tgid == tgid {
			n[k.Gen]++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOccupancyRuns: the runs of a tier's buckets that firstOf gives are
// those of abi.OccBit, for a tier of more buckets than bits (the first
// tier by default) and of fewer (the first tier of 1024 blocks).
func TestOccupancyRuns(t *testing.T) {
	for _, n := range []uint32{tierBuckets(1024), abi.OccBits, tierBuckets(firstTier), tierBuckets(1 << 22)} {
		tr := &tier{buckets: n, mult: abi.OccMult(n)}
		if tr.firstOf(0) != 0 || tr.firstOf(abi.OccBits) != n {
			t.Errorf("%d buckets: the runs start at %d and end at %d", n, tr.firstOf(0), tr.firstOf(abi.OccBits))
		}
		for b := range n {
			bit := abi.OccBit(b, tr.mult)
			if lo, hi := tr.firstOf(bit), tr.firstOf(bit+1); b < lo || b >= hi {
				t.Fatalf("%d buckets: bucket %d has bit %d, whose run is %d to %d", n, b, bit, lo, hi)
			}
		}
	}
}

// TestOccupancy: blocks put into the live table set the bits of their
// runs in every tier, a walk sees every block, and the walk of a drop
// clears the bits of the runs it empties, so that an empty table has
// none set.
func TestOccupancy(t *testing.T) {
	needBPF(t)
	for _, first := range []uint32{0, 1024} {
		t.Run("first tier "+map[uint32]string{0: "default", 1024: "1024"}[first], func(t *testing.T) {
			p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 18, FirstTable: first})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if s := occupancy(t, p); s != (occState{}) {
				t.Fatalf("before any block: %+v", s)
			}
			fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 20_000, stacks: 100, seed: 1})
			fillTable(t, p, tableFill{tgid: otherTgid, allocs: 3_000, stacks: 100, seed: 2})
			if first != 0 {
				if tiers := len(p.tables.made()); tiers != abi.TableTiers {
					t.Errorf("with a first tier of 1024 blocks: %d tiers made, want %d", tiers, abi.TableTiers)
				}
			}
			s := occupancy(t, p)
			if s.hidden != 0 || s.set != s.held {
				t.Errorf("after 23000 blocks: %+v; want every run held set, and no other", s)
			}
			if n := countTgid(t, p, fakeTgid); n[0] != 20_000 || len(n) != 1 {
				t.Errorf("a walk saw %v blocks of the first process, want 20000", n)
			}
			if err := p.Forget(fakeTgid); err != nil {
				t.Fatal(err)
			}
			s = occupancy(t, p)
			if s.hidden != 0 || s.set != s.held || s.held == 0 {
				t.Errorf("after the first process's blocks are dropped: %+v; want the bits of the runs emptied cleared", s)
			}
			if n := countTgid(t, p, otherTgid); n[0] != 3_000 || len(n) != 1 {
				t.Errorf("a walk saw %v blocks of the second process, want 3000", n)
			}
			if err := p.Forget(otherTgid); err != nil {
				t.Fatal(err)
			}
			if s := occupancy(t, p); s != (occState{}) {
				t.Errorf("after every block is dropped: %+v, want no bit set", s)
			}
		})
	}
}

// TestOccupancyClearRace: a block put into a run while a walk clears its
// bit, after the walk found the run empty, is not hidden: put before the
// bit is cleared, the walk's read of the run again sees it and sets the
// bit back; put after, the put finds the bit clear and sets it.
func TestOccupancyClearRace(t *testing.T) {
	needBPF(t)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 18})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defer func() { clearHook = nil }()
	tr := p.tables.made()[0]
	var info bpf.MdtraceAllocInfo
	for _, cleared := range []bool{false, true} {
		ptr := uint64(0x55d000000000)
		if cleared {
			ptr += 64
		}
		// A block put and taken out leaves its run empty under a set bit.
		gone := bpf.MdtraceAllocKey{Tgid: fakeTgid, Gen: 1, Ptr: ptr}
		if ok, _ := tr.put(&gone, &info); !ok {
			t.Fatal("no room")
		}
		b, j, ok := findKey(tr, &gone)
		if !ok || !tr.takeOut(tr.bucket(b), j, &gone) {
			t.Fatal("the block put is not there to take out")
		}
		run := abi.OccBit(b, tr.mult)
		// The same address and process: the same bucket.
		racing := bpf.MdtraceAllocKey{Tgid: fakeTgid, Ptr: ptr}
		raced := false
		clearHook = func(h *tier, bit uint32, c bool) {
			if h == tr && bit == run && c == cleared && !raced {
				raced = true
				if ok, _ := tr.put(&racing, &info); !ok {
					t.Error("no room")
				}
			}
		}
		seen := 0
		tr.each(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo, _ *bpf.MdtraceBucket, _ int) { seen++ })
		clearHook = nil
		if !raced || seen != 0 {
			t.Fatalf("cleared %v: the walk did not find the run empty (it saw %d blocks)", cleared, seen)
		}
		if rb, _, ok := findKey(tr, &racing); !ok || rb != b {
			t.Fatalf("cleared %v: the block put while the walk cleared its bit is not in bucket %d", cleared, b)
		}
		if s := occupancy(t, p); s.hidden != 0 {
			t.Errorf("cleared %v: the block put while the walk cleared its bit is hidden: %+v", cleared, s)
		}
		tr.each(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo, _ *bpf.MdtraceBucket, _ int) {
			if *k == racing {
				seen++
			}
		})
		if seen != 1 {
			t.Errorf("cleared %v: the next walk saw the block %d times, want once", cleared, seen)
		}
		if _, j, ok := findKey(tr, &racing); !ok || !tr.takeOut(tr.bucket(b), j, &racing) {
			t.Fatalf("cleared %v: the block put is not there to take out", cleared)
		}
	}
}

// TestOccupancyRace: a block put into a run whose bit a walk is clearing
// is never hidden. A goroutine puts a block into one of a few buckets,
// takes it out (its run empty again), puts another (the same address and
// process, another gen: the same bucket) and checks its run's bit is set,
// then takes it out too, over and over, while two goroutines walk the
// table, clearing the bits of the runs they find empty, and count the
// blocks of another process, which stay.
func TestOccupancyRace(t *testing.T) {
	needBPF(t)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 18})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const stay = 16
	fillTable(t, p, tableFill{tgid: otherTgid, allocs: stay, stacks: 100, seed: 1})
	tr := p.tables.made()[0]
	var (
		stop    = make(chan struct{})
		walkers sync.WaitGroup
		walks   atomic.Int64
	)
	for range 2 {
		walkers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// The tier alone: the walk of a few runs is where the
				// time goes, not the counts eachAlloc reads first.
				n := 0
				tr.each(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo, _ *bpf.MdtraceBucket, _ int) {
					if k.Tgid == otherTgid {
						n++
					}
				})
				if n != stay {
					t.Errorf("a walk saw %d blocks of the process whose blocks stay, want %d", n, stay)
					return
				}
				walks.Add(1)
			}
		})
	}
	var info bpf.MdtraceAllocInfo
	hidden, rounds := 0, 0
	for ; rounds < 200_000 || walks.Load() < 100_000 && rounds < 20_000_000; rounds++ {
		i := rounds
		ptr := 0x55d000000000 + uint64(i%8)<<6
		churn := bpf.MdtraceAllocKey{Tgid: fakeTgid, Gen: 1, Ptr: ptr}
		keep := bpf.MdtraceAllocKey{Tgid: fakeTgid, Ptr: ptr}
		if ok, _ := tr.put(&churn, &info); !ok {
			t.Fatalf("round %d: no room", i)
		}
		if b, j, ok := findKey(tr, &churn); !ok || !tr.takeOut(tr.bucket(b), j, &churn) {
			t.Fatalf("round %d: the block put is not there to take out", i)
		}
		if ok, _ := tr.put(&keep, &info); !ok {
			t.Fatalf("round %d: no room", i)
		}
		b, j, ok := findKey(tr, &keep)
		if !ok {
			t.Fatalf("round %d: the block put is not there", i)
		}
		// No walk clears a bit while this one reads it.
		tr.clearing.RLock()
		bit := abi.OccBit(b, tr.mult)
		if atomic.LoadUint64(&tr.occ[bit/64])&(1<<(bit%64)) == 0 {
			hidden++
		}
		tr.clearing.RUnlock()
		tr.takeOut(tr.bucket(b), j, &keep)
	}
	close(stop)
	walkers.Wait()
	if hidden != 0 {
		t.Errorf("%d blocks of %d put under a clear bit", hidden, rounds)
	}
	if n := countTgid(t, p, fakeTgid); len(n) != 0 {
		t.Errorf("at the end a walk saw %v blocks of the process whose blocks went, want none", n)
	}
	s := occupancy(t, p)
	t.Logf("%d rounds, %d walks; occupancy %+v", rounds, walks.Load(), s)
	if s.hidden != 0 || s.set != s.held {
		t.Errorf("at the end: %+v; want every run held set, and no other", s)
	}
	if walks.Load() < 100_000 {
		t.Errorf("only %d walks while the blocks went in and out", walks.Load())
	}
}

// findKey returns the bucket and slot of key's entry in tier tr.
func findKey(tr *tier, key *bpf.MdtraceAllocKey) (uint32, int, bool) {
	b0, b1 := bucketsOf(key, tr.buckets)
	for _, b := range []uint32{b0, b1} {
		bk := tr.bucket(b)
		for j := range abi.BucketSlots {
			if atomic.LoadUint64(&bk.Ptr[j]) == key.Ptr && bk.Tgid[j] == key.Tgid && bk.Gen[j] == key.Gen {
				return b, j, true
			}
		}
	}
	return 0, 0, false
}
