//go:build linux

package tracer

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/bpf"
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
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	before := linkFDs(t)
	self := os.Getpid()
	if err := p.Attach(self, libc); err != nil {
		t.Skipf("no glibc at the Debian path: %v", err)
	}
	parent := os.Getppid()
	if err := p.Attach(parent, libc); err != nil {
		t.Fatal(err)
	}
	attached := linkFDs(t)
	if attached <= before {
		t.Fatalf("%d link descriptors after attaching, %d before", attached, before)
	}
	p.Release(self)
	if got := p.Attached(self); len(got) != 0 {
		t.Errorf("Attached after Release = %v", got)
	}
	p.cleanRetired()
	p.closing.Wait()
	if got, want := linkFDs(t), before+(attached-before)/2; got != want {
		t.Errorf("%d link descriptors after releasing one of two processes, want %d", got, want)
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
