//go:build linux

package session

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// auditInjectCost is what taking a process's calls with the shim costs it,
// in its wall time: its holds, 2 to 3 ms; its traps until it is routed;
// the shim's loading and first touches (python3's 41 ms run on a 2-core VM
// took 20 ms longer taken at its 2048th call, 24 ms at its 4096th, 11 ms
// not taken with its 6000 calls, at 1.7 to 2.5 µs a trap): the price
// where no shell of the audit's own could be injected to price one
// (calibrate), until the injections made in the audit are priced (priced).
const auditInjectCost = 16 * time.Millisecond

// auditInjectCalls is the count of allocator calls (each a trap into the
// probes) at which --all --inject takes a process's calls with the shim,
// until the cost of a trap here is measured (injectThreshold); and the
// count when it cannot be.
const auditInjectCalls = 8192

// auditInjectMin and auditInjectMax bound the count measured: a trap
// measured far out of what machines show is not to be trusted that far.
const (
	auditInjectMin = 1024
	auditInjectMax = 65536
)

// injectThreshold is the count of calls at which a process is taken, where
// a call costs it c.PerCall() in traps: once its traps have cost it what
// the injection would. That is the rule of renting until the rent paid
// equals the price: whatever the process does next, it pays at most twice
// what the best choice made in advance would have cost it. A trap costs
// 1 to 10 µs from one machine to another (virtual machines are the
// slowest), and so the count goes from 16000 to 1600. The probes say at
// once when a process reaches the count (tracer.BusyReader); each program
// is counted from its exec.
func injectThreshold(c tracer.TrapCost) uint32 {
	return callsFor(auditInjectCost, c.PerCall())
}

// callsFor is the count of calls whose traps, at per a call, cost price.
func callsFor(price, per time.Duration) uint32 {
	if per <= 0 {
		return auditInjectMax
	}
	return uint32(min(max(int64(price/per), auditInjectMin), auditInjectMax))
}

// The price of an injection is measured on the processes injected
// (auditInjector.priced): the median of the last auditPriceRuns, once
// there are auditPriceMin, sets the count at which a process is taken
// when it is off by more than a quarter from the one in use.
const (
	auditPriceRuns = 8
	auditPriceMin  = 3
)

// repriced returns the count of calls at which a process is taken, by the
// median of prices at per a call, and whether it differs from cur by more
// than a quarter of cur.
func repriced(prices []time.Duration, per time.Duration, cur uint64) (uint32, time.Duration, bool) {
	if len(prices) < auditPriceMin || per <= 0 {
		return uint32(cur), 0, false
	}
	sorted := slices.Sorted(slices.Values(prices))
	med := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		med = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	n := callsFor(med, per)
	diff := int64(n) - int64(cur)
	return n, med, diff*4 > int64(cur) || -diff*4 > int64(cur)
}

// auditInjectEager is the count at which a run of a program taken before
// in the audit is taken: knowing that the program calls the allocator much
// (a build runs the same compiler again and again), the best choice is to
// take it at once, past its start.
const auditInjectEager = 256

// auditInjectSay is how many runs of a program taken before are said one
// by one: a build runs its compiler thousands of times. The others are
// counted at the end.
const auditInjectSay = 3

// auditInjector is --all --inject: the processes that have called the
// allocator busyCalls times get mdtrace's shim, loaded into them as
// -p --inject does, and their calls go through its hooks, which sample
// them in the process; only the sampled ones reach the probes, at the
// shim's sites. The probes on the C library have no PID filter: the hooks
// pass each call on through a bypass of the probed instructions
// (tracer.Probes.Bypass), and the blocks the probes sampled before are
// given to the shim, whose frees it then reports (Injected.Adopt).
type auditInjector struct {
	probes *tracer.Probes
	shim   string
	// busyCalls is the count of calls at which a process is taken.
	busyCalls   uint64
	sampleBytes uint64
	depth       int
	say         func(string)
	// injected are the processes whose calls the shim takes, each with
	// its program's stamp (an exec ends the shim); refused those tried
	// that could not be, for this program.
	injected map[int]*auditInjected
	refused  map[int]*auditRefusal
	// total counts the processes injected during the audit, eager those
	// of them that ran a program taken before; runsSaid counts, for each
	// program, its runs said one by one (auditInjectSay at most).
	total, eager int
	runsSaid     map[string]int
	// ahead are the processes whose shim's sites are being probed, or
	// are, ahead of their injection (soon): each one's result comes on
	// its channel, once.
	ahead map[int]*aheadProbes
	// perCall is what a call's traps cost a process here, measured at
	// the start (0: not measured, or the count given by --inject-calls,
	// which stays); prices are the last injections' costs (priced).
	perCall time.Duration
	prices  []time.Duration
}

// aheadProbes are the probes on the shim's sites of a process soon busy,
// attached (Probes.AttachBatches) in the background: done is closed once
// err is the attach's result.
type aheadProbes struct {
	// st is the process's stamp when they were asked for: a PID used
	// again is another process, whose task the link's filter does not
	// match.
	st   procStamp
	done chan struct{}
	err  error
}

// attachAhead attaches the probes on the shim's sites for process pid, of
// stamp st, in the background.
func (ij *auditInjector) attachAhead(pid int, st procStamp) *aheadProbes {
	a := &aheadProbes{st: st, done: make(chan struct{})}
	go func() {
		a.err = ij.probes.AttachBatches(pid, stacks.LocalFile(ij.shim))
		close(a.done)
	}()
	return a
}

// wait returns the result of the attach, waiting for it.
func (a *aheadProbes) wait() error {
	<-a.done
	return a.err
}

// ended reports whether the attach has ended, without waiting.
func (a *aheadProbes) ended() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// auditRefusal is a process the shim could not be loaded into, for the
// program of stamp st and gen gen.
type auditRefusal struct {
	st  procStamp
	gen uint32
	// err is why, said at the next scan (nil once said, or for a process
	// gone): a process that executed a program meanwhile, or ended, made
	// reads of its files and maps fail as they went, and is not one to
	// speak of (it is taken anew once its new program is busy).
	err error
}

type auditInjected struct {
	in    *tracer.Injected
	stamp procStamp
	// gen is its program's gen: an exec of the same file changes it.
	gen uint32
	// calls is the process's count of calls at the probes once routed.
	calls uint64
}

func newAuditInjector(probes *tracer.Probes, shim string, busyCalls uint32, sampleBytes uint64, depth int, say func(string)) *auditInjector {
	return &auditInjector{probes: probes, shim: shim, busyCalls: uint64(busyCalls), sampleBytes: sampleBytes, depth: depth, say: say,
		injected: map[int]*auditInjected{}, refused: map[int]*auditRefusal{}, runsSaid: map[string]int{}, ahead: map[int]*aheadProbes{}}
}

// soon probes the shim's sites for process pid ahead, in the background:
// the probes say it will soon be busy. The registration of a probe waits
// for a grace period of the kernel's, 5 to 20 ms here, which its calls
// until it is busy cover; waited for once it is, its calls went on
// trapping meanwhile, 44,000 of a sqlite3's. A process that ends or is
// refused before its injection has its probes taken away (scan).
func (ij *auditInjector) soon(pid int) {
	if _, on := ij.ahead[pid]; on {
		return
	}
	st, err := stampOf(pid)
	if err != nil || !ij.takeable(pid, st) {
		return
	}
	ij.ahead[pid] = ij.attachAhead(pid, st)
}

// priced notes the price of an injection: the time it held the process,
// and the traps of its calls from the busy event to the route. The count
// at which a process is taken follows the median of the last ones, which
// is what injections cost here (3 to 9 ms on a VM of 0.6 µs traps), where
// it followed the price of the shell's (calibrate), or auditInjectCost.
func (ij *auditInjector) priced(price time.Duration) {
	if ij.perCall <= 0 {
		return
	}
	ij.prices = append(ij.prices, price)
	if len(ij.prices) > auditPriceRuns {
		ij.prices = ij.prices[1:]
	}
	n, med, change := repriced(ij.prices, ij.perCall, ij.busyCalls)
	if !change {
		return
	}
	if err := ij.probes.SetBusyCalls(n); err != nil {
		ij.say(fmt.Sprintf("--inject: %v", err))
		return
	}
	ij.busyCalls = uint64(n)
	ij.say(fmt.Sprintf("--inject: an injection costs a process about %.1f ms here (the median of the last %d: the time it held the process, and the traps of its calls until they were routed): a process gets mdtrace's shim at its %s call from now on",
		float64(med.Microseconds())/1000, len(ij.prices), ordinal(n)))
}

// dropAhead takes away the probes attached ahead for process pid, once
// their attach has ended: waiting for it with wait, or else left for a
// later call while it goes on.
func (ij *auditInjector) dropAhead(pid int, wait bool) {
	a, on := ij.ahead[pid]
	if !on || !wait && !a.ended() {
		return
	}
	a.wait()
	delete(ij.ahead, pid)
	ij.release(pid)
}

// scan injects the processes that called the allocator busyCalls
// times or more and are not injected yet (those whose event the probes
// had no room for, those refused before whose program changed), and
// releases those that ended or executed a program. seenAt are the
// processes' stamps, as the libc scan has them.
func (ij *auditInjector) scan(seenAt map[int]procStamp) {
	calls, err := ij.probes.ProcCalls(processAlive)
	if err != nil {
		ij.say(fmt.Sprintf("--inject: reading the processes' calls: %v", err))
		return
	}
	for pid, a := range ij.injected {
		if st, ok := seenAt[pid]; !ok || !ij.same(pid, a, st) {
			// Ended, or executing another program.
			ij.forget(pid)
		}
	}
	for pid, r := range ij.refused {
		if cur, ok := seenAt[pid]; !ok || !ij.stillRefused(pid, r, cur) {
			delete(ij.refused, pid)
		}
	}
	ij.sayRefusals()
	for pid, a := range ij.ahead {
		// Ended, executing another program, or refused, before it was
		// injected.
		if st, ok := seenAt[pid]; !ok || !sameStamp(a.st, st) || ij.refused[pid] != nil {
			ij.dropAhead(pid, false)
		}
	}
	for _, pid := range slices.Sorted(maps.Keys(calls)) {
		if st, ok := seenAt[pid]; ok && calls[pid] >= ij.busyCalls {
			ij.take(pid, st)
		}
	}
}

// busy injects process pid, which the probes say has just called the
// allocator busyCalls times, unless it was taken or refused.
func (ij *auditInjector) busy(pid int) {
	if st, err := stampOf(pid); err == nil {
		ij.take(pid, st)
	}
}

// take injects process pid, of stamp st, unless it is injected or was
// refused for this program; a refusal is said once.
func (ij *auditInjector) take(pid int, st procStamp) {
	if !ij.takeable(pid, st) {
		return
	}
	gen := ij.probes.ExecGen(pid)
	if err := ij.inject(pid, st); err != nil {
		// One that executed a program meanwhile is taken once the new
		// one is busy.
		if errors.Is(err, tracer.ErrExecuted) || ij.probes.ExecGen(pid) != gen {
			return
		}
		r := &auditRefusal{st: st, gen: gen}
		if !errors.Is(err, tracer.ErrProcessGone) {
			r.err = err
		}
		ij.refused[pid] = r
	}
}

// takeable reports whether process pid, of stamp st, may be injected: not
// injected, nor refused, for the program it runs. One taken that executed
// a program since (busy already, or an eager run) is released first.
func (ij *auditInjector) takeable(pid int, st procStamp) bool {
	if a, done := ij.injected[pid]; done {
		if ij.same(pid, a, st) {
			return false
		}
		ij.forget(pid)
	}
	r, no := ij.refused[pid]
	return !no || !ij.stillRefused(pid, r, st)
}

// stillRefused reports whether refusal r of process pid holds for the
// program it runs now, of stamp st: not executed anew since.
func (ij *auditInjector) stillRefused(pid int, r *auditRefusal, st procStamp) bool {
	return sameStamp(r.st, st) && ij.probes.ExecGen(pid) == r.gen
}

// sayRefusals says the refusals not said yet, of the processes that run
// the program they were refused for: an exec caught part way through (its
// gen not changed yet when the refusal was made) has changed it since.
func (ij *auditInjector) sayRefusals() {
	for _, pid := range slices.Sorted(maps.Keys(ij.refused)) {
		r := ij.refused[pid]
		if r.err == nil {
			continue
		}
		err := r.err
		r.err = nil
		if st, e := stampOf(pid); e != nil || !ij.stillRefused(pid, r, st) || tracer.Exiting(pid) && stacks.LiveTask(pid) == "" {
			continue
		}
		ij.say(fmt.Sprintf("--inject: process %d (%s) called the allocator %d times or more, but its calls stay with the probes: %v", pid, progName(pid), ij.busyCalls, err))
	}
}

func sameStamp(a, b procStamp) bool { return os.SameFile(a.exe, b.exe) && a.start == b.start }

// same reports whether process pid, of stamp st, runs the program a was
// taken with: the same process, its program not executed anew.
func (ij *auditInjector) same(pid int, a *auditInjected, st procStamp) bool {
	return sameStamp(a.stamp, st) && ij.probes.ExecGen(pid) == a.gen
}

// forget releases process pid, taken, which ended or executed a program:
// its shim went with the old program.
func (ij *auditInjector) forget(pid int) {
	ij.release(pid)
	delete(ij.injected, pid)
}

func progName(pid int) string { return strings.TrimSpace(tracer.ProgName(pid)) }

// inject loads the shim into process pid and routes its calls.
func (ij *auditInjector) inject(pid int, st procStamp) error {
	gen := ij.probes.ExecGen(pid)
	// Its calls from here to the route are part of the injection's price.
	before, beforeErr := ij.probes.ProcCallsOf(pid)
	r, err := ij.load(pid, st, true)
	if err != nil {
		return err
	}
	in, routed, unrouted, inside := r.in, r.routed, r.unrouted, r.inside
	calls, callsErr := ij.probes.ProcCallsOf(pid)
	ij.injected[pid] = &auditInjected{in: in, stamp: st, gen: gen, calls: calls}
	ij.total++
	// Priced only where both counts were read: a count that could not be
	// (its entry not there yet, or no room for it) would price the
	// process's every call.
	if beforeErr == nil && callsErr == nil && calls >= before {
		ij.priced(in.Held + time.Duration(calls-before)*ij.perCall)
	}
	// Its program's next runs are taken at their auditInjectEager-th call.
	// (A full map of them leaves them at busyCalls.)
	eager, _ := ij.probes.MarkEager(pid)
	name := progName(pid)
	what := fmt.Sprintf("called the allocator %d times", calls)
	var later string
	if eager {
		ij.eager++
		n := ij.runsSaid[name]
		if n >= auditInjectSay {
			return nil
		}
		ij.runsSaid[name] = n + 1
		what = fmt.Sprintf("runs a program given the shim before in this audit (taken after %d calls of the allocator)", calls)
		if n+1 == auditInjectSay {
			later = fmt.Sprintf("; the later runs of %s are taken without a line each, counted at the end", name)
		}
	}
	msg := fmt.Sprintf("--inject: process %d (%s) %s: its calls go through mdtrace's shim from now on, sampled in the process (%d GOT slots; %d blocks sampled before taken over)",
		pid, name, what, routed, in.Adopted)
	if unrouted > 0 {
		msg += fmt.Sprintf("; %d slots could not be routed and stay with the probes", unrouted)
	}
	if inside > 0 {
		msg += fmt.Sprintf("; %d threads were inside a call of the allocator at every stop tried: those calls may be missed", inside)
	}
	ij.say(msg + later)
	return nil
}

// loaded is a process whose calls load routed to the shim: the injection,
// its GOT slots routed and not, and the threads inside a call of the
// allocator at every stop tried.
type loaded struct {
	in                       *tracer.Injected
	routed, unrouted, inside int
}

// load loads the shim into process pid, of stamp st, and routes its calls:
// inject's work, without what the audit keeps of the process. With unwind
// (and backtraces), the process's unwind tables are placed for its stacks
// through the shim.
func (ij *auditInjector) load(pid int, st procStamp, unwind bool) (*loaded, error) {
	if pid == 1 {
		return nil, errors.New("process 1 is never injected")
	}
	// A seccomp filter may kill the process at a system call the
	// injection makes it make (mmap, mprotect, openat for dlopen).
	if seccompFiltered(pid) {
		return nil, errors.New("it runs under a seccomp filter, which the shim's loading could break")
	}
	lib, err := tracer.AllocatorOfRunning(pid)
	if err != nil {
		return nil, err
	}
	if !stacks.IsLibc(lib.Name) {
		return nil, fmt.Errorf("its allocator is %s: the shim routes glibc's", lib.Name)
	}
	// A shim an earlier mdtrace gave back is started again; one in use
	// (another mdtrace's) is left alone.
	if maps, err := stacks.ReadMaps(pid); err == nil && slices.ContainsFunc(maps.Mappings, func(m stacks.Mapping) bool {
		return strings.HasPrefix(filepath.Base(m.Name()), shimName)
	}) && !tracer.ShimGivenBack(pid, ij.shim) {
		return nil, errors.New("it has mdtrace's shim already, in use")
	}
	// The probes on the shim's sites go on while the shim is loaded: a
	// probe's registration waits for a grace period of the kernel's, 5 to
	// 20 ms, and the load takes 2 to 8. The calls are routed once both are
	// done, and the shim told in the same stop that its sites are live
	// (Ready): the process traps at the allocator's probes meanwhile, but
	// runs. Routed earlier, its first hand-over of samples waited for the
	// sites, up to 14 ms of a cc1plus run here. The probes are for the
	// file at mdtrace's path, which InjectLoad makes sure the process maps.
	a, on := ij.ahead[pid]
	if on && !sameStamp(a.st, st) {
		// Another process, or another program, than the one they were
		// asked for.
		ij.dropAhead(pid, true)
		on = false
	}
	if !on {
		a = ij.attachAhead(pid, st)
	}
	delete(ij.ahead, pid)
	attachErr := a.wait
	// Whatever fails, the probes are taken away once attached.
	undo := func() { attachErr(); ij.release(pid) }
	// The shim samples, and batches its samples: one probe hit for
	// several.
	in, err := tracer.InjectLoad(pid, ij.shim, true, ij.depth, ij.sampleBytes, &tracer.AuditHooks{
		Bypass: func() ([]byte, error) { return ij.probes.Bypass(pid, lib) },
		// The loader's blocks for the shim are not the program's.
		Quiet: func(tid int, on bool) {
			if err := ij.probes.Quiet(tid, on); err != nil {
				ij.say(fmt.Sprintf("--inject: process %d: %v; the loader's blocks for the shim may count as the process's", pid, err))
			}
		},
		Early: true,
	})
	if err != nil {
		undo()
		return nil, err
	}
	if err := ij.probes.CountPending(pid, in.Pending); err != nil {
		undo()
		return nil, err
	}
	// The shim samples: the probes take each call it reports.
	if err := ij.probes.ShimSamples(pid, true); err != nil {
		undo()
		return nil, err
	}
	in.Adopt = func() ([]uint64, error) { return ij.probes.LiveAddrs(pid) }
	if unwind && ij.depth > 0 {
		// Its stacks go through the shim once routed.
		ij.probes.LoadUnwind(pid)
	}
	if err := attachErr(); err != nil {
		in.Stop()
		undo()
		return nil, fmt.Errorf("probing the shim's sites: %w", err)
	}
	var readyErr error
	routed, unrouted, inside, err := in.Route(func() { readyErr = in.Ready() })
	if err == nil {
		err = readyErr
	}
	if err == nil && routed == 0 {
		err = errors.New("it calls the allocator through no GOT slot the shim could route (a statically linked allocator?)")
	}
	if err != nil {
		in.Stop()
		undo()
		return nil, err
	}
	return &loaded{in: in, routed: routed, unrouted: unrouted, inside: inside}, nil
}

// release takes away what the probes keep for the shim of process pid:
// the probes on its sites, its samples taken as such, where its batches
// count what they hold.
func (ij *auditInjector) release(pid int) {
	// By mdtrace's path: the process's own may be gone with its program.
	// The probes' links close in the background: tens of ms each, which
	// the audit's loop would otherwise wait for at every process ended.
	ij.probes.DetachFileLater(pid, stacks.LocalFile(ij.shim))
	ij.probes.ShimSamples(pid, false)
	ij.probes.CountPending(pid, 0)
}

// stop gives the calls of every process still injected back to the
// allocator, before the probes go.
func (ij *auditInjector) stop() {
	ij.sayRefusals()
	for pid := range ij.ahead {
		ij.dropAhead(pid, true)
	}
	given := 0
	pids := slices.Sorted(maps.Keys(ij.injected))
	for _, pid := range pids {
		a := ij.injected[pid]
		if !processAlive(pid) {
			continue
		}
		// What still trapped: calls through a pointer to the
		// allocator taken before, the loader's own.
		if n, err := ij.probes.ProcCallsOf(pid); err == nil {
			ij.say(fmt.Sprintf("--inject: process %d (%s): %d calls reached the allocator's probes after the shim took its calls (calls through pointers to the allocator taken before, the loader's own)", pid, progName(pid), n-a.calls))
		}
		if n := a.in.AdoptFailed(); n > 0 {
			ij.say(fmt.Sprintf("--inject: process %d (%s): the shim had no memory to take %d of the blocks the probes sampled before it took the calls: their frees were missed, and they stay in its figures", pid, progName(pid), n))
		}
		_, err := a.in.Stop()
		ij.probes.CountPending(pid, 0)
		if err != nil {
			if processAlive(pid) {
				ij.say(fmt.Sprintf("--inject: giving process %d's calls back to the allocator: %v (its shim does so by itself once the probes are gone)", pid, err))
			}
			continue
		}
		given++
	}
	if ij.total > 0 {
		ij.say(fmt.Sprintf("--inject: the shim took the calls of %d processes during the audit (%d of them runs of a program taken before; a process that executes a program anew is taken anew); %d still running were given back to the allocator", ij.total, ij.eager, given))
	}
}

// seccompFiltered reports whether process pid runs under a seccomp filter
// (its status's Seccomp field is 2).
func seccompFiltered(pid int) bool {
	v, _ := statusField(pid, "Seccomp")
	return v == "2"
}
