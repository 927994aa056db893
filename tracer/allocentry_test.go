//go:build linux

package tracer

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/stacks"
)

// TestPrologueDepth: the start of a function counts until its first call,
// jump away, atomic access or stack move other than a push or a sub, and
// the depth is its pushes and subs (glibc 2.36's malloc and free).
func TestPrologueDepth(t *testing.T) {
	for _, c := range []struct {
		name  string
		code  []byte
		depth int
		ok    bool
	}{
		{"nothing", nil, 0, true},
		// push %r12; push %rbp; push %rbx; mov %rdi,%rbx; sub $0x10,%rsp
		{"malloc", []byte{0x41, 0x54, 0x55, 0x53, 0x48, 0x89, 0xfb, 0x48, 0x83, 0xec, 0x10}, 40, true},
		// test %rdi,%rdi; je +0xbf (not taken); push %rbp
		{"free", []byte{0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0x00, 0x00, 0x00, 0x55}, 8, true},
		// endbr64; push %rbp
		{"endbr64", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55}, 8, true},
		// push %rbp; call
		{"call", []byte{0x55, 0xe8, 0, 0, 0, 0}, 0, false},
		// jmp
		{"jump", []byte{0xe9, 0, 0, 0, 0}, 0, false},
		// lock cmpxchg %rdx,(%rdi)
		{"lock", []byte{0xf0, 0x48, 0x0f, 0xb1, 0x17}, 0, false},
		// xchg %eax,(%rdi), locked without a prefix
		{"xchg", []byte{0x87, 0x07}, 0, false},
		// pop %rbx
		{"pop", []byte{0x5b}, 0, false},
		// mov %rdi,%rsp
		{"stack moved", []byte{0x48, 0x89, 0xfc}, 0, false},
		// an instruction cut short
		{"cut", []byte{0x48, 0x83, 0xec}, 0, false},
	} {
		depth, ok := prologueDepth(c.code)
		if depth != c.depth || ok != c.ok {
			t.Errorf("%s: depth %d, %v; want %d, %v", c.name, depth, ok, c.depth, c.ok)
		}
	}
}

// TestStopsAtAllocatorEntry: a thread of busyleak, whose calls of malloc
// and free trap into probes on the C library, is stopped again and again:
// the stops inside the C library at the start of malloc or free, called
// from busyleak, count as stops where it can make calls, and the return
// address read past the pushes is in busyleak's code. With every call
// sampled, every malloc has its return probe, and returns to the kernel's
// trampoline: those stops do not count, and there are some.
func TestStopsAtAllocatorEntry(t *testing.T) {
	needProbes(t)
	t.Run("sampled", func(t *testing.T) {
		if entry, _ := stopsAtEntry(t, 4096); entry == 0 {
			t.Error("no stop at the start of the allocator")
		}
	})
	t.Run("every call", func(t *testing.T) {
		if _, trampoline := stopsAtEntry(t, 0); trampoline == 0 {
			t.Error("no stop at the start of malloc returning to the trampoline")
		}
	})
}

// stopsAtEntry stops busyleak's spinning thread 40 times, its calls
// trapping into probes that sample one every sampleBytes (0: every call),
// and returns how many stops were at the start of the allocator, called
// from busyleak, and how many at its start returning to the trampoline.
func stopsAtEntry(t *testing.T, sampleBytes uint64) (entry, trampoline int) {
	probes, err := LoadProbes(ProbeConfig{All: true, SampleBytes: sampleBytes, NoBatch: true, MaxAllocs: 1 << 16})
	if err != nil {
		t.Fatalf("LoadProbes: %v", err)
	}
	defer probes.Close()
	pid, _, _ := startBusyleak(t, testProg(t, "busyleak"))
	attachAllocator(t, probes, pid)
	pf, err := filesOf(pid, "")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	var exe []stacks.Mapping
	for _, m := range maps.Mappings {
		if filepath.Base(m.Path) == "busyleak" && m.Perms[2] == 'x' {
			exe = append(exe, m)
		}
	}
	// The spinning thread: busyleak's only thread besides its main one,
	// which waits for commands.
	tids, err := tasks(pid)
	if err != nil || len(tids) != 2 {
		t.Fatalf("busyleak's threads: %v, %v", tids, err)
	}
	spinner := tids[1]
	var (
		outside, inside int
		wrong           error
	)
	err = onTracerThread(func() error {
		for range 40 {
			if !seizeStopped(spinner) {
				return fmt.Errorf("thread %d could not be stopped", spinner)
			}
			var regs unix.PtraceRegs
			err := unix.PtraceGetRegs(spinner, &regs)
			switch {
			case err != nil:
			case pf.canCall(&regs):
				outside++
			case pf.atAllocatorEntry(pid, spinner, &regs):
				entry++
				// The return address read is in busyleak's code.
				if caller, _ := pf.entryCaller(spinner, &regs); !inMappings(exe, caller) && wrong == nil {
					wrong = fmt.Errorf("a stop at %#x returns to %#x, not into busyleak's code", regs.Rip, caller)
				}
			default:
				inside++
				if caller, ok := pf.entryCaller(spinner, &regs); ok {
					if now, err := stacks.ReadMaps(pid); err == nil && now.Find(caller) != nil && now.Find(caller).Path == "[uprobes]" {
						trampoline++
					}
				}
			}
			ptrace(unix.PTRACE_DETACH, spinner, 0, 0)
			nap(200 * time.Microsecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if wrong != nil {
		t.Error(wrong)
	}
	t.Logf("of 40 stops: %d outside the C library, %d at the start of its allocator, %d elsewhere in it (%d at its start returning to the trampoline)", outside, entry, inside, trampoline)
	return entry, trampoline
}
