//go:build linux

package tracer

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/stacks"
)

// linkFDs counts this process's open BPF link descriptors.
func linkFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(target, "bpf_link") {
			n++
		}
	}
	return n
}

// tableCounts counts the live table's blocks of each process.
func tableCounts(t *testing.T, p *Probes) map[uint32]int {
	t.Helper()
	n := map[uint32]int{}
	if err := p.eachAlloc(func(k *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo) { n[k.Tgid]++ }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReleaseClosesLinks: a released process's uprobe links are closed
// (in the background), its probe list and place in the traced processes
// gone; the links of other processes stay.
func TestReleaseClosesLinks(t *testing.T) {
	p := smallTable(t)
	libc := stacks.LocalFile("/lib/x86_64-linux-gnu/libc.so.6")
	before := linkFDs(t)
	self := os.Getpid()
	if err := p.Attach(self, libc); err != nil {
		t.Skipf("no glibc at the Debian path: %v", err)
	}
	one := linkFDs(t)
	parent := os.Getppid()
	if err := p.Attach(parent, libc); err != nil {
		t.Fatal(err)
	}
	two := linkFDs(t)
	// The first attach also attached the exec tracepoint.
	if two-one < 1 || one-before != two-one+1 {
		t.Fatalf("link descriptors: %d before, %d after one process, %d after two", before, one, two)
	}
	p.Release(self)
	if got := p.Attached(self); len(got) != 0 {
		t.Errorf("Attached after Release = %v", got)
	}
	p.cleanRetired()
	p.closing.Wait()
	if got := linkFDs(t); got != one {
		t.Errorf("%d link descriptors after releasing one of two processes, want %d", got, one)
	}
	if len(p.Attached(parent)) == 0 {
		t.Error("the other process lost its probes")
	}
	p.Detach()
	if got := linkFDs(t); got != before {
		t.Errorf("%d link descriptors after Detach, want %d", got, before)
	}
}

// TestReleaseDropsTable: a released process's blocks leave the table in
// the background, in one walk for all the processes released, and at once
// when its PID is traced again.
func TestReleaseDropsTable(t *testing.T) {
	p := smallTable(t)
	const third = 4190003
	fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 100, stacks: 5, seed: 1})
	fillTable(t, p, tableFill{tgid: otherTgid, allocs: 30, stacks: 5, seed: 2})
	fillTable(t, p, tableFill{tgid: third, allocs: 20, stacks: 5, seed: 3})
	p.Release(fakeTgid)
	p.Release(third)
	deadline := time.Now().Add(10 * retireDelay)
	for {
		n := tableCounts(t, p)
		if n[fakeTgid] == 0 && n[third] == 0 {
			if n[otherTgid] != 30 {
				t.Errorf("the other process has %d blocks, want 30", n[otherTgid])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("released processes' blocks still in the table after %v: %v", 10*retireDelay, n)
		}
		time.Sleep(retireDelay / 4)
	}

	// A PID released and traced again (here as a forked child) starts
	// from its new parent's blocks, none of its old ones.
	p.stopCleaner()
	p.retireEvery = time.Hour
	fillTable(t, p, tableFill{tgid: fakeTgid, allocs: 100, stacks: 5, seed: 4})
	p.Release(fakeTgid)
	if n := tableCounts(t, p); n[fakeTgid] != 100 {
		t.Fatalf("%d blocks right after Release, want the 100 still there (the cleaner is stopped)", n[fakeTgid])
	}
	if err := p.Fork(otherTgid, fakeTgid, true); err != nil {
		t.Fatal(err)
	}
	if n := tableCounts(t, p); n[fakeTgid] != 30 || n[otherTgid] != 30 {
		t.Errorf("after the PID's fork: %v, want 30 blocks each for %d and %d", n, fakeTgid, otherTgid)
	}
}

// TestExecGens: after an exec, a process's blocks of the program before
// (another gen) are skipped by readers at once and dropped by the cleaner;
// a forked child copies the current program's blocks only.
func TestExecGens(t *testing.T) {
	p := smallTable(t)
	p.retireEvery = time.Hour
	put := func(gen uint32, n int) {
		var (
			keys  []bpf.MdtraceAllocKey
			infos []bpf.MdtraceAllocInfo
		)
		for i := range n {
			keys = append(keys, bpf.MdtraceAllocKey{Tgid: fakeTgid, Gen: gen, Ptr: uint64(gen)<<32 | uint64(i+1)<<4})
			infos = append(infos, bpf.MdtraceAllocInfo{Size: uint64(gen)})
		}
		if err := p.tables.putBatch(keys, infos); err != nil {
			t.Fatal(err)
		}
	}
	put(5, 10)
	put(6, 3)
	blocks := func(pid int) int {
		snap, err := p.Snapshot(pid)
		if err != nil {
			t.Fatal(err)
		}
		return len(snap.Allocs)
	}
	if n := blocks(fakeTgid); n != 13 {
		t.Errorf("%d blocks before any exec is known, want all 13", n)
	}
	// What the exec tracepoint does when the process executes.
	if err := p.objs.Gens.Put(uint32(fakeTgid), uint32(6)); err != nil {
		t.Fatal(err)
	}
	if n := blocks(fakeTgid); n != 3 {
		t.Errorf("%d blocks after the exec, want the new program's 3", n)
	}
	totals, err := p.Totals()
	if err != nil {
		t.Fatal(err)
	}
	if got := totals[fakeTgid]; got != (Totals{Blocks: 3, Bytes: 18, Sampled: 3}) {
		t.Errorf("Totals = %+v, want 3 blocks of 6 bytes", got)
	}
	p.Execed(fakeTgid)
	p.cleanRetired()
	if n := tableCounts(t, p)[fakeTgid]; n != 3 {
		t.Errorf("%d blocks in the table after the cleaner, want 3", n)
	}
	if err := p.Fork(fakeTgid, otherTgid, true); err != nil {
		t.Fatal(err)
	}
	var gen uint32
	if err := p.objs.Gens.Lookup(uint32(otherTgid), &gen); err != nil || gen != 6 {
		t.Errorf("the child's gen: %d, %v; want 6", gen, err)
	}
	if n := blocks(otherTgid); n != 3 {
		t.Errorf("the forked child has %d blocks, want 3", n)
	}
}
