//go:build linux

package tracer

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/leak"
)

func TestTierSizes(t *testing.T) {
	const k = 1 << 10
	cases := []struct {
		total, first uint32
		want         []uint32
	}{
		{4 << 20, 256 * k, []uint32{256 * k, 1024 * k, 2816 * k}},
		{1 << 21, 256 * k, []uint32{256 * k, 1024 * k, 768 * k}},
		{64 << 20, 256 * k, []uint32{256 * k, 1024 * k, 4096 * k, 60160 * k}},
		{20000, 1024, []uint32{1024, 4096, 14880}},
		{256 * k, 256 * k, []uint32{256 * k}},
		{1000, 256 * k, []uint32{1000}},
		{1000, 0, []uint32{1000}},
		// The last tier is what is left, however small.
		{256*k + 1, 256 * k, []uint32{256 * k, 1}},
		// No tier is more than what is left: the next is all of it.
		{3000, 1000, []uint32{1000, 2000}},
		{^uint32(0), 1 << 30, []uint32{1 << 30, 1<<32 - 1 - 1<<30}},
	}
	for _, c := range cases {
		got := tierSizes(c.total, c.first)
		if !slices.Equal(got, c.want) {
			t.Errorf("tierSizes(%d, %d) = %v, want %v", c.total, c.first, got, c.want)
		}
		var sum uint64
		for _, s := range got {
			sum += uint64(s)
		}
		if sum != uint64(c.total) || len(got) > abi.TableTiers {
			t.Errorf("tierSizes(%d, %d) = %v: %d tiers adding up to %d", c.total, c.first, got, len(got), sum)
		}
	}
}

// TestLiveTableGrows: a process whose live blocks outgrow the first tier of
// the live table, in steps the table's watch keeps up with, has every block
// tracked: frees and reallocs find the blocks in the older tiers, and the
// snapshot at exit holds exactly the blocks left, whichever tier they are in.
func TestLiveTableGrows(t *testing.T) {
	needProbes(t)
	// Tiers of 1024, 4096 and 14880 blocks; 5000 blocks at most live.
	t.Run("one thread", func(t *testing.T) { testLiveTableGrows(t, 5, 1000, 80, 1) })
	// Four threads reach the end of a tier together: 6400 blocks at most.
	t.Run("four threads", func(t *testing.T) { testLiveTableGrows(t, 8, 200, 80, 4) })
}

func testLiveTableGrows(t *testing.T, batches, per, ms, threads int) {
	prog := testProg(t, "grower")
	cfg := ProbeConfig{StackDepth: 16, MaxAllocs: 20000, FirstTable: 1024}
	n := batches * per * threads
	var (
		tiers     int
		now, most uint64
		growErr   error
	)
	exitHook = func(p *Probes) {
		tiers = len(p.tables.maps())
		now, most, growErr = p.TableRoom()
	}
	defer func() { exitHook = nil }()
	snap, names, c, st := exitSnapshot(t, cfg, prog, strconv.Itoa(batches), strconv.Itoa(per), strconv.Itoa(ms), strconv.Itoa(threads))
	if !st.Known || st.Code != 0 {
		t.Fatalf("exit status %+v", st)
	}
	if tiers != 3 || now != 1024+4096+14880 || most != 20000 || growErr != nil {
		t.Errorf("at exit: %d tiers, room for %d blocks of %d (%v); want 3 tiers, room for all 20000", tiers, now, most, growErr)
	}
	// glibc frees blocks of its own at a thread's end that no malloc
	// call made (a thread's tcache): unknown frees with one thread only
	// are the table's.
	if c.TableFull != 0 || (threads == 1 && c.UnknownFrees != 0) {
		t.Errorf("counters %+v: blocks lost or frees not found", c)
	}
	bySite := map[string]map[uint64]int{}
	for _, a := range snap.Allocs {
		fn := ""
		if n := names[a.StackID]; len(n) > 0 {
			fn = n[0]
		}
		if bySite[fn] == nil {
			bySite[fn] = map[uint64]int{}
		}
		bySite[fn][a.Size]++
	}
	// Half are left, a tenth of those grown.
	kept, grown := n/2, n/20
	if bySite["grow_batch"][100] != kept-grown || bySite["grow_realloc"][200] != grown || len(bySite["grow_batch"]) != 1 || len(bySite["grow_realloc"]) != 1 {
		t.Errorf("live blocks by function and size: %v; want %d of 100 from grow_batch, %d of 200 from grow_realloc", bySite, kept-grown, grown)
	}
	// Every block the program made went in, and out again but for those left.
	if c.Allocs-c.Frees != uint64(len(snap.Allocs)) {
		t.Errorf("%d allocations, %d frees, %d live", c.Allocs, c.Frees, len(snap.Allocs))
	}
}

// TestPutBatchMovesOn: blocks user space puts in (a zygote child's copy of
// its parent's) that fill the tier in use make the next tier once it gets
// about half full and move the table on to it once it is full, as the
// probes do.
func TestPutBatchMovesOn(t *testing.T) {
	needBPF(t)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 20000, FirstTable: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if tiers := len(p.tables.maps()); tiers != 1 {
		t.Errorf("before any block: %d tiers made, want 1", tiers)
	}
	fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 1500, stacks: 10, seed: 1})
	if tiers, top := len(p.tables.maps()), tierInUse(p); tiers != 2 || top != 1 {
		t.Errorf("after 1500 blocks in tiers of 1024 and 4096: %d tiers made, tier %d in use; want 2 and 1", tiers, top)
	}
	fillTable(t, p, tableFill{tgid: otherTgid, allocs: 2800, stacks: 10, seed: 2})
	if tiers, top := len(p.tables.maps()), tierInUse(p); tiers != 3 || top != 1 {
		t.Errorf("after 4300 blocks: %d tiers made, tier %d in use; want 3 and 1", tiers, top)
	}
	if n, ok := p.tables.estimate(); !ok || n != 4300 {
		t.Errorf("the tiers hold %d blocks (%v), want 4300", n, ok)
	}
}

// TestTableSharedWithUserSpace: while four threads of a process fill the
// live table past its first tiers, mdtrace copies the process's blocks to a
// zygote child and drops them again, over and over, in the same buckets
// the probes write: every block of the process is still tracked at its
// exit, the copies are all gone, no slot is left half taken, the counts
// add up to the entries, and every run of buckets that holds one has its
// occupancy bit set.
func TestTableSharedWithUserSpace(t *testing.T) {
	needProbes(t)
	prog := testProg(t, "grower")
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 20000, FirstTable: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const child = 4190011
	var (
		stop   = make(chan struct{})
		done   = make(chan int)
		snap   *leak.Snapshot
		copies int
	)
	churn := func(pid int) {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := p.Fork(pid, child, true); err != nil {
				t.Errorf("Fork: %v", err)
				return
			}
			if err := p.Forget(child); err != nil {
				t.Errorf("Forget: %v", err)
				return
			}
			n++
		}
	}
	proc, err := Launch([]string{prog, "8", "200", "80", "4"}, nil, nil, Hooks{
		Ready: func(pid int) error {
			lib, err := AllocatorOfExec(pid)
			if err != nil {
				return err
			}
			if err := p.Attach(pid, lib); err != nil {
				return err
			}
			go churn(pid)
			return nil
		},
		Exit: func(pid int) {
			close(stop)
			copies = <-done
			// Its own error: the test's err is written by Launch's
			// return meanwhile, on another goroutine.
			var serr error
			if snap, serr = p.Snapshot(pid); serr != nil {
				t.Errorf("Snapshot: %v", serr)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := proc.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("exit status %+v, %v", st, err)
	}
	if snap == nil {
		t.Fatal("no snapshot at exit")
	}
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d copies made and dropped; counters %+v", copies, c)
	// 6400 blocks made, half freed, a tenth of the rest grown.
	bySize := map[uint64]int{}
	for _, a := range snap.Allocs {
		bySize[a.Size]++
	}
	if c.TableFull != 0 || bySize[100] != 3200-320 || bySize[200] != 320 {
		t.Errorf("live blocks by size %v, %d lost; want 2880 of 100 and 320 of 200", bySize, c.TableFull)
	}
	if copies < 10 {
		t.Errorf("only %d copies made while the process ran", copies)
	}
	var entries, busy, childs int
	for _, tr := range p.tables.made() {
		for b := range tr.buckets {
			bk := tr.bucket(b)
			for j := range abi.BucketSlots {
				switch {
				case bk.Ptr[j] == abi.SlotBusy:
					busy++
				case bk.Ptr[j] != 0:
					entries++
					if bk.Tgid[j] == child {
						childs++
					}
				}
			}
		}
	}
	n, ok := p.tables.estimate()
	if busy != 0 || childs != 0 || !ok || n != entries {
		t.Errorf("%d slots left busy, %d blocks of the child left, counts %d (%v) for %d entries", busy, childs, n, ok, entries)
	}
	// The probes set the bits of the runs they put blocks into while the
	// walks cleared those of the runs they emptied.
	if s := occupancy(t, p); s.hidden != 0 {
		t.Errorf("occupancy %+v: runs that hold blocks under a clear bit", s)
	}
}

// TestCloseDuringWalks: probes closed while other goroutines walk the live
// table and put blocks into it wait for those in flight before the tiers'
// memory goes; later walks see an empty table and puts fail, and mdtrace
// does not fault. (mdtrace itself closes the probes once the rest of it
// has stopped; this is the tiers' own guard, which the other maps, closed
// after, do not need.)
func TestCloseDuringWalks(t *testing.T) {
	needBPF(t)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 18})
	if err != nil {
		t.Fatal(err)
	}
	fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 100_000, stacks: 100, seed: 1})
	var (
		stop   = make(chan struct{})
		walks  sync.WaitGroup
		rounds atomic.Int64
	)
	for g := range 3 {
		walks.Go(func() {
			keys := make([]bpf.MdtraceAllocKey, 100)
			infos := make([]bpf.MdtraceAllocInfo, 100)
			for r := uint64(0); ; r++ {
				select {
				case <-stop:
					return
				default:
				}
				if g < 2 {
					p.eachAlloc(func(*bpf.MdtraceAllocKey, *bpf.MdtraceAllocInfo) {})
				} else {
					for i := range keys {
						keys[i] = bpf.MdtraceAllocKey{Tgid: otherTgid, Ptr: (r*100 + uint64(i) + 1) << 4}
					}
					p.tables.putBatch(keys, infos)
				}
				rounds.Add(1)
			}
		})
	}
	for rounds.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	p.Close()
	close(stop)
	walks.Wait()
	n := 0
	p.eachAlloc(func(*bpf.MdtraceAllocKey, *bpf.MdtraceAllocInfo) { n++ })
	err = p.tables.putBatch([]bpf.MdtraceAllocKey{{Tgid: otherTgid, Ptr: 16}}, []bpf.MdtraceAllocInfo{{Size: 1}})
	if n != 0 || err == nil {
		t.Errorf("after Close: a walk saw %d blocks, a put returned %v", n, err)
	}
}
