//go:build linux

package tracer

import (
	"cmp"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/internal/benchproc"
	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/output"
)

// needBPF skips a test or benchmark that loads the probes where it cannot:
// without root or without BTF.
func needBPF(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (CAP_BPF) to load BPF programs")
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		tb.Skip("needs a kernel with BTF (/sys/kernel/btf/vmlinux)")
	}
}

// Fake processes whose live tables the tests fill from user space; no
// probe is attached, so nothing else touches them.
const (
	fakeTgid  = 4190001
	otherTgid = 4190002
)

// stack16 is a value of the stacks map with a backtrace depth of 16.
type stack16 struct {
	Ips [16]uint64
}

// tableFill describes live allocations to put in the probes' maps.
type tableFill struct {
	tgid   uint32
	allocs int
	stacks int    // unique backtraces the allocations use (16 frames each)
	seed   uint64 // the same seed gives the same stack ids
}

// fillTable puts f.allocs live allocations and f.stacks backtraces in the
// maps, as the probes would: call sites follow a Zipf law, sizes are
// log-uniform from 8 bytes to 64 KiB, pointers grow through a heap, one
// block in a hundred has no backtrace. It returns the stack ids.
func fillTable(tb testing.TB, p *Probes, f tableFill) []uint64 {
	tb.Helper()
	rng := rand.New(rand.NewPCG(f.seed, uint64(f.tgid)))
	ids := make([]uint64, f.stacks)
	vals := make([]stack16, f.stacks)
	for i := range ids {
		ids[i] = rng.Uint64() | 1
		for j := range vals[i].Ips {
			vals[i].Ips[j] = 0x7f0000000000 + rng.Uint64N(1<<40)
		}
	}
	for i := 0; i < len(ids); i += 1 << 14 {
		j := min(i+1<<14, len(ids))
		if _, err := p.objs.Stacks.BatchUpdate(ids[i:j], vals[i:j], nil); err != nil {
			tb.Fatalf("filling the stacks map: %v", err)
		}
	}
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(f.stacks-1))
	const chunk = 1 << 16
	keys := make([]bpf.MdtraceAllocKey, 0, chunk)
	infos := make([]bpf.MdtraceAllocInfo, 0, chunk)
	ptr := uint64(0x55d000000000) + uint64(f.tgid)<<20
	flush := func() {
		if err := p.tables.putBatch(keys, infos); err != nil {
			tb.Fatalf("filling the live table: %v", err)
		}
		keys, infos = keys[:0], infos[:0]
	}
	for range f.allocs {
		size := uint64(1) << (rng.IntN(14) + 3)
		size = size/2 + rng.Uint64N(size/2+1)
		info := bpf.MdtraceAllocInfo{Size: size}
		if rng.IntN(100) != 0 {
			info.StackId = ids[zipf.Uint64()]
		}
		if rng.IntN(50) == 0 {
			info.Size |= abi.AllocZygote
		}
		keys = append(keys, bpf.MdtraceAllocKey{Tgid: f.tgid, Ptr: ptr})
		infos = append(infos, info)
		ptr += (size+8+15)&^15 + 16*uint64(rng.IntN(4))
		if len(keys) == chunk {
			flush()
		}
	}
	if len(keys) > 0 {
		flush()
	}
	return ids
}

// snapshotBySyscall is Snapshot reading the live table's tiers through the
// kernel (a lookup per bucket) instead of mdtrace's mapping of them: the
// reference for Snapshot.
func (p *Probes) snapshotBySyscall(tgid int) (*leak.Snapshot, error) {
	snap := &leak.Snapshot{PID: tgid, Stacks: map[uint64][]uint64{}, BacktraceSize: p.stackDepth}
	var bk bpf.MdtraceBucket
	tiers := p.tables.made()
	for i := len(tiers) - 1; i >= 0; i-- {
		for b := range tiers[i].buckets {
			if err := tiers[i].m.Lookup(b, &bk); err != nil {
				return nil, err
			}
			for j := range abi.BucketSlots {
				key := bpf.MdtraceAllocKey{Tgid: bk.Tgid[j], Gen: bk.Gen[j], Ptr: bk.Ptr[j]}
				if key.Ptr > abi.SlotBusy && int(key.Tgid) == tgid {
					snap.Allocs = append(snap.Allocs, allocOf(&key, &bk.Info[j]))
				}
			}
		}
	}
	for i := range snap.Allocs {
		id := snap.Allocs[i].StackID
		if _, ok := snap.Stacks[id]; ok || id == 0 {
			continue
		}
		if st := p.Stack(id); st != nil {
			snap.Stacks[id] = st
		} else {
			snap.Allocs[i].StackID = 0
		}
	}
	return snap, nil
}

// sameSnapshot reports how two snapshots differ, or "".
func sameSnapshot(a, b *leak.Snapshot) string {
	if a.PID != b.PID || a.BacktraceSize != b.BacktraceSize {
		return fmt.Sprintf("pid %d/%d, backtrace size %d/%d", a.PID, b.PID, a.BacktraceSize, b.BacktraceSize)
	}
	byPtr := func(x, y leak.Alloc) int { return cmp.Compare(x.Ptr, y.Ptr) }
	if !slices.Equal(slices.SortedFunc(slices.Values(a.Allocs), byPtr), slices.SortedFunc(slices.Values(b.Allocs), byPtr)) {
		return fmt.Sprintf("%d and %d allocations, not the same", len(a.Allocs), len(b.Allocs))
	}
	if len(a.Stacks) != len(b.Stacks) {
		return fmt.Sprintf("%d and %d stacks", len(a.Stacks), len(b.Stacks))
	}
	for id, f := range a.Stacks {
		if !slices.Equal(f, b.Stacks[id]) {
			return fmt.Sprintf("stack %#x: %x and %x", id, f, b.Stacks[id])
		}
	}
	return ""
}

// TestSnapshotMatchesSyscalls checks that Snapshot, Totals, Fork and
// Forget, which read and write the live table in mdtrace's mapping of it,
// see exactly what reads through the kernel see.
func TestSnapshotMatchesSyscalls(t *testing.T) {
	needBPF(t)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 13, MaxStacks: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 3000, stacks: 200, seed: 1})
	fillTable(t, p, tableFill{tgid: otherTgid, allocs: 1500, stacks: 100, seed: 2})
	// A stack id whose backtrace is gone: the allocation keeps no id.
	key := []bpf.MdtraceAllocKey{{Tgid: fakeTgid, Ptr: 0x10}}
	if err := p.tables.putBatch(key, []bpf.MdtraceAllocInfo{{Size: 5, StackId: 0xdead}}); err != nil {
		t.Fatal(err)
	}
	for _, tgid := range []int{fakeTgid, otherTgid, 99} {
		want, err := p.snapshotBySyscall(tgid)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Snapshot(tgid)
		if err != nil {
			t.Fatalf("Snapshot(%d): %v", tgid, err)
		}
		if d := sameSnapshot(got, want); d != "" {
			t.Errorf("Snapshot(%d) differs from the table read through the kernel: %s", tgid, d)
		}
	}
	totals, err := p.Totals()
	if err != nil {
		t.Fatal(err)
	}
	for _, tgid := range []int{fakeTgid, otherTgid} {
		snap, _ := p.snapshotBySyscall(tgid)
		var bytes uint64
		for _, a := range snap.Allocs {
			bytes += a.Size
		}
		if tt := totals[tgid]; tt.Blocks != uint64(len(snap.Allocs)) || tt.Bytes != bytes {
			t.Errorf("Totals()[%d] = %+v, want %d blocks, %d bytes", tgid, tt, len(snap.Allocs), bytes)
		}
	}

	const child = 4190003
	if err := p.Fork(fakeTgid, child, true); err != nil {
		t.Fatal(err)
	}
	parent, _ := p.snapshotBySyscall(fakeTgid)
	copied, _ := p.snapshotBySyscall(child)
	parent.PID = child
	if d := sameSnapshot(copied, parent); d != "" {
		t.Errorf("Fork: the child's table differs from its parent's: %s", d)
	}
	if err := p.Forget(child); err != nil {
		t.Fatal(err)
	}
	if gone, _ := p.snapshotBySyscall(child); len(gone.Allocs) != 0 {
		t.Errorf("Forget left %d allocations", len(gone.Allocs))
	}
	if again, _ := p.snapshotBySyscall(fakeTgid); len(again.Allocs) != len(parent.Allocs) {
		t.Errorf("Forget of the child changed the parent's table: %d allocations, want %d", len(again.Allocs), len(parent.Allocs))
	}
}

// millionTable loads probes whose live table, of capacity 1<<21, holds a
// million allocations of fakeTgid (20,000 backtraces of 16 frames) and
// 100,000 of otherTgid.
func millionTable(tb testing.TB) *Probes {
	needBPF(tb)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 21})
	if err != nil {
		tb.Fatal(err)
	}
	fillTable(tb, p, tableFill{tgid: fakeTgid, allocs: 1_000_000, stacks: 20_000, seed: 1})
	fillTable(tb, p, tableFill{tgid: otherTgid, allocs: 100_000, stacks: 2_000, seed: 2})
	return p
}

// smallTable loads the probes with 16-frame backtraces and a live table of
// 65536 entries, closed when the test ends.
func smallTable(tb testing.TB) *Probes {
	tb.Helper()
	needBPF(tb)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 16})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// BenchmarkSnapshot1M times Probes.Snapshot of a process with a million
// live allocations (20,000 backtraces of 16 frames) in a table of capacity
// 1<<21 that also holds 100,000 blocks of another process, next to the
// same snapshot read through the kernel, and the bare walk of the table.
func BenchmarkSnapshot1M(b *testing.B) {
	p := millionTable(b)
	defer p.Close()

	run := func(name string, read func() (int, error)) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				var err error
				if n, err = read(); err != nil {
					b.Fatal(err)
				}
			}
			if n != 1_000_000 {
				b.Fatalf("%d allocations read, want 1000000", n)
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/snapshot")
		})
	}
	run("mapped", func() (int, error) {
		s, err := p.Snapshot(fakeTgid)
		if err != nil {
			return 0, err
		}
		return len(s.Allocs), nil
	})
	run("syscalls", func() (int, error) {
		s, err := p.snapshotBySyscall(fakeTgid)
		if err != nil {
			return 0, err
		}
		return len(s.Allocs), nil
	})
	// The walk alone: no sorting, no backtraces.
	run("walk", func() (int, error) {
		n := 0
		err := p.eachAlloc(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo) {
			if k.Tgid == fakeTgid {
				n++
			}
		})
		return n, err
	})
}

// dumpFigures are what TestSnapshotDumpChild measures.
type dumpFigures struct {
	Seconds, BaseMB, PeakMB float64
	// The phases: Probes.Snapshot, UniqueList, WriteHeapDump to the file.
	SnapshotS, UniqueS, WriteS float64
}

const snapshotDumpChildEnv = "MDTRACE_SNAPSHOT_DUMP_CHILD"

// BenchmarkSnapshotDump1M measures mdtrace's heap dump of a process with a
// million live allocations from end to end, in a process of its own (see
// TestSnapshotDumpChild): Probes.Snapshot, UniqueList and WriteHeapDump to
// a file. It reports the time, and the peak resident memory of the process
// during the dump.
func BenchmarkSnapshotDump1M(b *testing.B) {
	needBPF(b)
	var f dumpFigures
	for b.Loop() {
		benchproc.Run(b, "TestSnapshotDumpChild", []string{snapshotDumpChildEnv + "=" + b.TempDir()}, "FIGURES", &f)
	}
	b.ReportMetric(f.Seconds, "s/dump")
	b.ReportMetric(f.SnapshotS, "s-Snapshot")
	b.ReportMetric(f.UniqueS, "s-UniqueList")
	b.ReportMetric(f.WriteS, "s-write")
	b.ReportMetric(f.PeakMB, "MB-peak-RSS")
	b.ReportMetric(f.BaseMB, "MB-RSS-before")
}

// TestSnapshotDumpChild is BenchmarkSnapshotDump1M's process: it fills the
// live table as BenchmarkSnapshot1M does, resets its peak resident size
// (VmHWM, by writing 5 to /proc/self/clear_refs), makes the dump as
// mdtrace does, and prints the time and its resident sizes.
func TestSnapshotDumpChild(t *testing.T) {
	dir := os.Getenv(snapshotDumpChildEnv)
	if dir == "" {
		t.Skip("run by BenchmarkSnapshotDump1M")
	}
	p := millionTable(t)
	defer p.Close()
	var f dumpFigures
	f.BaseMB = benchproc.ResetPeak(t)
	t0 := time.Now()
	snap, err := p.Snapshot(fakeTgid)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	d := &output.HeapDump{Fingerprint: "mdtrace/bench", BacktraceSize: 16, Records: snap.UniqueList(false)}
	t2 := time.Now()
	err = output.WriteFileAtomic(filepath.Join(dir, "heap.txt"), 0o644, func(w io.Writer) error { return output.WriteHeapDump(w, d) })
	if err != nil {
		t.Fatal(err)
	}
	t3 := time.Now()
	f.Seconds = t3.Sub(t0).Seconds()
	f.SnapshotS, f.UniqueS, f.WriteS = t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), t3.Sub(t2).Seconds()
	f.PeakMB = benchproc.PeakMB(t)
	benchproc.Print("FIGURES", f)
}

// BenchmarkFork1M times what a zygote fork of a process with a million
// live blocks costs while the child is held: the copy of its parent's
// blocks into the live table, then, apart, the drop of the copy at the
// child's exit or exec.
func BenchmarkFork1M(b *testing.B) {
	needBPF(b)
	// Room for the parent's blocks and the child's copy.
	p, err := LoadProbes(ProbeConfig{StackDepth: 16, MaxAllocs: 1 << 22})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	fillTable(b, p, tableFill{tgid: fakeTgid, allocs: 1_000_000, stacks: 20_000, seed: 1})
	const child = 4190031
	var forks, forgets time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := p.Fork(fakeTgid, child, true); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := p.Forget(child); err != nil {
			b.Fatal(err)
		}
		forks += t1.Sub(t0)
		forgets += time.Since(t1)
	}
	b.ReportMetric(forks.Seconds()/float64(b.N), "s/fork")
	b.ReportMetric(forgets.Seconds()/float64(b.N), "s/forget")
}

// BenchmarkFewBlocks times what the exit and the zygote fork of a small
// process cost mdtrace in a live table of the default room that holds 40
// blocks (a shell's): the snapshot of its blocks, and the copy of its
// blocks to a child then their drop. The walks read only the buckets the
// occupancy bitmap says may hold blocks, not the first tier's 3 MB.
func BenchmarkFewBlocks(b *testing.B) {
	needBPF(b)
	p, err := LoadProbes(ProbeConfig{StackDepth: 16})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	fillTable(b, p, tableFill{tgid: fakeTgid, allocs: 40, stacks: 8, seed: 1})
	b.Run("snapshot", func(b *testing.B) {
		for b.Loop() {
			s, err := p.Snapshot(fakeTgid)
			if err != nil {
				b.Fatal(err)
			}
			if len(s.Allocs) != 40 {
				b.Fatalf("%d allocations read, want 40", len(s.Allocs))
			}
		}
	})
	b.Run("fork", func(b *testing.B) {
		const child = 4190031
		for b.Loop() {
			if err := p.Fork(fakeTgid, child, true); err != nil {
				b.Fatal(err)
			}
			if err := p.Forget(child); err != nil {
				b.Fatal(err)
			}
		}
	})
}
