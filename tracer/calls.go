//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/bpf"
)

// What --all --inject reads of each process: how often it calls the
// allocator (the probes count it with ProbeConfig's CountCalls, and say
// when the count reaches BusyCalls), and the blocks the probes hold of it,
// which the shim loaded into it takes over.

// BusyReader reads the processes whose count of calls reached
// ProbeConfig's BusyCalls, and those that will soon.
type BusyReader struct {
	r    *EventReader[uint32]
	tgid uint32
}

// WatchBusy returns the reader of the processes whose count of calls
// reaches ProbeConfig's BusyCalls, each once per program. An event the
// ring buffer had no room for is lost: ProcCalls still has the count.
func (p *Probes) WatchBusy() (*BusyReader, error) {
	r, err := newEventReader[uint32](p.objs.Busy, "busy processes")
	if err != nil {
		return nil, err
	}
	return &BusyReader{r: r}, nil
}

// busySoon marks a process told before it is busy (BUSY_SOON).
const busySoon = 1 << 31

// soonShare is the share of BusyCalls at which a process is told it will
// be busy soon: probing the shim's sites for it takes a grace period of
// the kernel's (5 to 20 ms), about what the rest of its way to BusyCalls
// takes while its traps are priced at 16 ms (session.auditInjectCost);
// less where the audit prices its injections lower (on a shell of its own
// as it starts, then by those made), the rest of the grace period then
// counted in the price of the injections made.
const soonShare = 4

// soonCalls is the count at which a process is told that it will be busy.
func soonCalls(busy uint32) uint32 { return busy / soonShare }

// Next returns the next busy process, waiting until deadline at the most
// (ErrNoRecord when none came; os.ErrClosed once closed); soon is set for
// a process told ahead: its count reached a quarter of BusyCalls, or it
// runs a program marked eager (MarkEager), which is told at its start.
func (r *BusyReader) Next(deadline time.Time) (pid int, soon bool, err error) {
	if err := r.r.Next(deadline, &r.tgid); err != nil {
		return 0, false, err
	}
	return int(r.tgid &^ busySoon), r.tgid&busySoon != 0, nil
}

// Close stops the reader.
func (r *BusyReader) Close() error { return r.r.Close() }

// SetBusyCalls sets the count at which a process is told on the busy
// reader from now on, instead of ProbeConfig's BusyCalls. A process whose
// count is past it already is not told: ProcCalls has its count.
func (p *Probes) SetBusyCalls(n uint32) error {
	if err := p.objs.SoonCalls.Set(soonCalls(n)); err != nil {
		return fmt.Errorf("setting the count of a process soon busy: %w", err)
	}
	if err := p.objs.BusyCalls.Set(n); err != nil {
		return fmt.Errorf("setting the count of a busy process: %w", err)
	}
	return nil
}

// ProcCalls returns each process's count of allocator calls (ProbeConfig's
// CountCalls) since its exec or the probes' start, and forgets the
// processes not alive.
func (p *Probes) ProcCalls(alive func(pid int) bool) (map[int]uint64, error) {
	out := map[int]uint64{}
	var (
		tgid uint32
		n    bpf.MdtraceProcCount
		gone []uint32
		it   = p.objs.ProcCalls.Iterate()
	)
	for it.Next(&tgid, &n) {
		if alive(int(tgid)) {
			out[int(tgid)] = n.Calls
		} else {
			gone = append(gone, tgid)
		}
	}
	if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
		return nil, err
	}
	for _, t := range gone {
		p.objs.ProcCalls.Delete(t)
	}
	return out, nil
}

// ProcCallsOf returns process pid's count of allocator calls since its
// exec or the probes' start: ProcCalls' less the EagerHead short of
// BusyCalls it started from, a run of a program marked eager.
func (p *Probes) ProcCallsOf(pid int) (uint64, error) {
	var n bpf.MdtraceProcCount
	err := p.objs.ProcCalls.Lookup(uint32(pid), &n)
	return n.Calls - n.Head, err
}

// ExecName is the program a process executed last, as the probes noted
// it with --all (a fork child's being its parent's).
type ExecName struct {
	// Path is the path given to execve (at most 127 bytes), "" for a fork
	// child of a process that executed its program before the audit.
	Path string
	// Comm is its command name then, Cgroup its cgroup's id (cgroup v2).
	Comm   string
	Cgroup uint64
}

// ExecName returns the program process tgid executed last; ok is false
// when the probes did not note it.
func (p *Probes) ExecName(tgid int) (ExecName, bool) {
	var n bpf.MdtraceExecName
	if p.objs.ExecNames.Lookup(uint32(tgid), &n) != nil {
		return ExecName{}, false
	}
	return ExecName{Path: cString(n.Path[:]), Comm: cString(n.Comm[:]), Cgroup: n.Cgroup}, true
}

// LiveAddrs returns the addresses of the blocks of process tgid's current
// program in the live table.
func (p *Probes) LiveAddrs(tgid int) ([]uint64, error) {
	mine := p.blocksOf(tgid)
	var out []uint64
	err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo) {
		if mine(key) {
			out = append(out, key.Ptr)
		}
	})
	return out, err
}

// Quiet makes the probes pass over the allocator calls of thread tid while
// on is set (--all --inject: the calls the injection makes it make).
func (p *Probes) Quiet(tid int, on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		if err := p.objs.QuietThreads.Put(uint32(tid), uint32(1)); err != nil {
			return fmt.Errorf("passing over thread %d's calls: %w", tid, err)
		}
		p.quiet++
		return p.objs.QuietOn.Set(uint32(1))
	}
	if err := p.objs.QuietThreads.Delete(uint32(tid)); errors.Is(err, ebpf.ErrKeyNotExist) {
		// Never passed over: its Put failed.
		return nil
	} else if err != nil {
		return fmt.Errorf("counting thread %d's calls again: %w", tid, err)
	}
	if p.quiet--; p.quiet == 0 {
		return p.objs.QuietOn.Set(uint32(0))
	}
	return nil
}

// MarkEager marks the program file of process pid eager: a process that
// executes it from now on is told on the busy reader at its EagerHead-th
// call rather than its BusyCalls-th. The file is the one the probes noted
// as they counted the process's calls, as the kernel has it; or, where
// they could not, the one at /proc/PID/exe, by stat (whose device is the
// kernel's but for a file of an overlayfs's lower layer with the upper on
// another file system: a container's program). It reports whether the
// file was marked before.
func (p *Probes) MarkEager(pid int) (bool, error) {
	var (
		n   bpf.MdtraceProcCount
		key bpf.MdtraceProgramFile
	)
	if p.objs.ProcCalls.Lookup(uint32(pid), &n) == nil {
		key = n.File
	}
	if key == (bpf.MdtraceProgramFile{}) {
		var st unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), &st); err != nil {
			return false, err
		}
		// The kernel's own encoding of a device: 12 bits of major,
		// 20 of minor.
		key = bpf.MdtraceProgramFile{Ino: st.Ino, Dev: unix.Major(st.Dev)<<20 | unix.Minor(st.Dev)}
	}
	var v uint32
	if p.objs.EagerPrograms.Lookup(key, &v) == nil {
		return true, nil
	}
	return false, p.objs.EagerPrograms.Put(key, uint32(1))
}
