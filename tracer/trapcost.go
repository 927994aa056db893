//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/stacks"
)

// In trapsite_amd64.s.
func trapPlain()
func trapEntry()
func trapBoth()
func trapEntryPC() uintptr
func trapBothPC() uintptr

// TrapCost is what a probe hit costs the process that traps, measured on
// this machine: it varies from one machine to another tenfold (1 to 10 µs
// on virtual machines, where the way back to user mode may exit to the
// hypervisor), and with the machine's load.
type TrapCost struct {
	// Entry is a hit of an entry probe; Return, of a return probe.
	Entry, Return time.Duration
}

// PerCall is what the probes on the allocator cost a process a call on
// average: every call hits its entry probe, and about half (the
// allocations, not the frees) a return probe too.
func (c TrapCost) PerCall() time.Duration { return c.Entry + c.Return/2 }

// trapRounds rounds of trapCalls calls of each function are timed, the
// three in turn; each one's figure is its fastest round's: what else runs
// on the machine only adds to a round (an interrupt, the hypervisor's own
// work), and the rounds' spread here is up to 40%.
const (
	trapRounds = 7
	trapCalls  = 150
)

// MeasureTrapCost measures TrapCost on a thread of mdtrace's own, with
// programs that only count their hits on functions of mdtrace's that start
// as glibc's malloc does: the thread's CPU time for calls of one unprobed,
// one with an entry probe, and one with a return probe too. A trap's cost is the thread's
// (the kernel handles it in the thread's context), so other work on the
// machine, the loading of the programs beside it, does not count. It takes
// about 2000 hits, 5 to 20 ms here, and each link's registration.
func MeasureTrapCost() (TrapCost, error) {
	var c TrapCost
	spec, err := bpf.LoadEmpty()
	if err != nil {
		return c, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return c, fmt.Errorf("loading the empty probe: %w", err)
	}
	defer coll.Close()
	prog := coll.Programs["count_probe"]
	offs, err := ownOffsets(trapEntryPC(), trapBothPC())
	if err != nil {
		return c, err
	}
	entryOff, bothOff := offs[0], offs[1]
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return c, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The probes see this thread alone (a perf uprobe's PID is a task).
	tid := unix.Gettid()
	for _, p := range []struct {
		off uint64
		ret bool
	}{{entryOff, false}, {bothOff, false}, {bothOff, true}} {
		attach := ex.Uprobe
		if p.ret {
			attach = ex.Uretprobe
		}
		l, err := attach("", prog, &link.UprobeOptions{Address: p.off, PID: tid})
		if err != nil {
			return c, fmt.Errorf("probing mdtrace's own code: %w", err)
		}
		defer l.Close()
	}
	var plain, entry, both []time.Duration
	for range trapRounds {
		for _, f := range []struct {
			call func()
			to   *[]time.Duration
		}{{trapPlain, &plain}, {trapEntry, &entry}, {trapBoth, &both}} {
			d, err := timeCalls(f.call)
			if err != nil {
				return c, err
			}
			*f.to = append(*f.to, d)
		}
	}
	// Every call of trapEntry and trapBoth hits an entry probe, every
	// call of trapBoth a return probe too.
	var hits uint64
	if err := coll.Variables["hits"].Get(&hits); err != nil {
		return c, err
	}
	if want := uint64(3 * trapRounds * trapCalls); hits != want {
		return c, fmt.Errorf("the probes on mdtrace's own code were hit %d times, not %d", hits, want)
	}
	// A difference lost in the rounds' spread (under emulation) is 0.
	base := slices.Min(plain)
	c.Entry, c.Return = max(slices.Min(entry)-base, 0), max(slices.Min(both)-slices.Min(entry), 0)
	return c, nil
}

// ErrCoarseClock is MeasureTrapCost's error where the thread's CPU clock
// does not advance over a round (a kernel whose scheduler clock counts
// ticks, as under QEMU's software emulation): a hit's cost cannot be told.
var ErrCoarseClock = errors.New("the thread's CPU clock did not advance over a round of calls: it counts in ticks here")

// timeCalls is the thread's CPU time for one call of f, over trapCalls.
func timeCalls(f func()) (time.Duration, error) {
	var a, b unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a); err != nil {
		return 0, err
	}
	for range trapCalls {
		f()
	}
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b); err != nil {
		return 0, err
	}
	if b.Nano() == a.Nano() {
		return 0, ErrCoarseClock
	}
	return time.Duration(b.Nano()-a.Nano()) / trapCalls, nil
}

// ownOffsets are the offsets in mdtrace's file of its code at pcs.
func ownOffsets(pcs ...uintptr) ([]uint64, error) {
	maps, err := stacks.ReadMaps(os.Getpid())
	if err != nil {
		return nil, err
	}
	var offs []uint64
	for _, pc := range pcs {
		m := maps.Find(uint64(pc))
		if m == nil || m.Path == "" {
			return nil, fmt.Errorf("no file maps mdtrace's code at %#x", pc)
		}
		offs = append(offs, uint64(pc)-m.Start+m.Offset)
	}
	return offs, nil
}
