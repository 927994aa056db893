//go:build linux

package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// auditShell is the program whose allocator --all probes: the system's
// libc, as the loader resolves it for the shell.
const auditShell = "/bin/sh"

// RunAll audits every process on the host that uses the system's libc, or
// another copy of glibc's libc (a container's): uprobes without a PID
// filter feed one live table. On an interrupt, at --duration and every
// --interval it ranks the processes by the live bytes they allocated since
// the audit began, with the backtrace option each one's top allocation
// sites (auditor). Only blocks allocated since mdtrace started are known,
// and only those of each process's current program: a process that
// executes another program leaves its blocks behind.
func RunAll(flags *options.Flags, stdout, stderr io.Writer) (int, error) {
	if err := CheckPrivileges(); err != nil {
		return 1, err
	}
	depth := 0
	var cfg *options.Config
	if flags.Options != "" {
		var err error
		cfg, err = options.ParseOptions(flags.Options, "--all")
		if err != nil {
			return 2, err
		}
		if cfg.Has(options.Backtrace) {
			depth = cfg.BacktraceFrames
		}
	}
	lib, err := tracer.AllocatorOfFile(auditShell, os.Environ())
	if err != nil {
		return 1, fmt.Errorf("finding the system's libc: %w", err)
	}
	// Sampling is decided where a call reaches the probes one at a time:
	// the batches of a shim preloaded by another mdtrace would bring every
	// block of theirs, which the estimates would weigh as samples, so
	// their site stays unprobed while sampling.
	var shim string
	if flags.Inject {
		if shim, err = shimPath(flags); err != nil {
			return 1, fmt.Errorf("--inject: %w", err)
		}
	}
	// What a trap costs here, measured while the programs load: the
	// count of calls at which --inject takes a process.
	busyCalls, why := uint32(auditInjectCalls), "as --inject-calls asks"
	var perCall time.Duration
	var trapCost chan trapMeasure
	// And what an injection costs here, priced on a shell of mdtrace's
	// own, started before the probes are on its libc.
	var shell *priceShell
	var shellErr error
	if flags.InjectCalls > 0 {
		busyCalls = flags.InjectCalls
	} else if flags.Inject {
		trapCost = make(chan trapMeasure, 1)
		go func() {
			c, err := tracer.MeasureTrapCost()
			trapCost <- trapMeasure{c, err}
		}()
		if shell, shellErr = startPriceShell(); shell != nil {
			defer func() {
				if shell != nil {
					shell.end()
				}
			}()
		}
	}
	probes, err := tracer.LoadProbes(tracer.ProbeConfig{MaxAllocs: flags.MaxAllocs, All: true, StackDepth: depth,
		SampleBytes: flags.SampleBytes, NoBatch: flags.SampleBytes > 0, CountCalls: flags.Inject, BusyCalls: busyCalls,
		EagerHead: auditInjectEager})
	if err != nil {
		return 1, err
	}
	defer probes.Close()
	if probes.Unguarded {
		fmt.Fprintf(stderr, "mdtrace: note: %s\n", tracer.UnguardedNote)
	}
	// The count is set before any process is counted.
	if trapCost != nil {
		m := <-trapCost
		why = fmt.Sprintf("the cost of a probe hit here could not be measured (%v)", m.err)
		if m.err == nil {
			perCall = m.cost.PerCall()
			busyCalls = injectThreshold(m.cost)
			why = pricedWhy(fmt.Sprintf("%d ms until the injections made here say what they cost", auditInjectCost.Milliseconds()), perCall)
			if err := probes.SetBusyCalls(busyCalls); err != nil {
				return 1, err
			}
		}
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer signal.Stop(sigs)
	// With backtraces, signal 47 writes each process's heap dump, as it
	// does for a process under Android's malloc debug.
	dumps := make(chan os.Signal, 1)
	if depth > 0 {
		signal.Notify(dumps, unix.Signal(options.BacktraceDumpSignal))
		defer signal.Stop(dumps)
	}
	say := func(msg string) { fmt.Fprintf(stderr, "mdtrace: %s\n", msg) }
	if err := partialAttach(probes.Attach(0, lib), say); err != nil {
		return 1, err
	}
	if err := probes.WatchAllExecs(); err != nil {
		return 1, err
	}
	// A process's first walks, before mdtrace has made its list of
	// mappings, are left to mdtrace: its list is made then, the walks
	// finished, and the process looked at (named, its maps read) at once
	// rather than at the next scan.
	fresh := make(chan freshProc, 64)
	syncWalks := func() {}
	if depth > 0 {
		walks, err := probes.DeferredWalks()
		if err != nil {
			return 1, err
		}
		var stop func()
		syncWalks, stop = auditWalks(probes, walks, fresh)
		defer stop()
	}
	aud := newAuditor(probes, flags, depth)
	aud.stderr = stderr
	if depth > 0 {
		aud.dumpPrefix, aud.dumpOnExit = cfg.BacktraceDumpPrefix, cfg.BacktraceDumpOnExit
	}
	libcs := newLibcFinder(lib)
	libcs.sampling, libcs.sampleBytes = flags.SampleBytes > 0, flags.SampleBytes
	libcs.onNew, libcs.onLate = aud.seen, aud.late
	fmt.Fprintf(stderr, "mdtrace: auditing every process that uses %s; interrupt for the summary\n", lib)
	if flags.SampleBytes > 0 {
		fmt.Fprintf(stderr, "mdtrace: sampling one allocation every %d bytes on average (--sample-bytes 0 counts every one): block counts and byte totals in the summaries are estimates, sizes are exact\n", flags.SampleBytes)
	}
	var (
		ij   *auditInjector
		busy <-chan busyEvent
	)
	if flags.Inject {
		ij = newAuditInjector(probes, shim, busyCalls, flags.SampleBytes, depth, say)
		ij.perCall = perCall
		if perCall > 0 {
			// The count is set again by the price of an injection here.
			cost, err := time.Duration(0), shellErr
			if shell != nil {
				cost, err = ij.calibrate(shell)
				shell = nil
			}
			if err == nil {
				busyCalls = callsFor(cost, perCall)
				if err := probes.SetBusyCalls(busyCalls); err != nil {
					return 1, err
				}
				ij.busyCalls = uint64(busyCalls)
				why = pricedWhy(fmt.Sprintf("%.1f ms here, priced on a shell of mdtrace's own until the injections made here say what they cost", float64(cost.Microseconds())/1000), perCall)
			} else {
				why = pricedWhy(fmt.Sprintf("%d ms until the injections made here say what they cost, as an injection into a shell of mdtrace's own could not price one (%v)", auditInjectCost.Milliseconds(), err), perCall)
			}
		}
		fmt.Fprintf(stderr, "mdtrace: --inject: a process gets mdtrace's shim at its %s call of the allocator (counted from its exec or the audit's start), %s; the shim samples its calls in the process, and gives them back to the allocator when the audit ends\n", ordinal(busyCalls), why)
		r, err := probes.WatchBusy()
		if err != nil {
			return 1, err
		}
		defer r.Close()
		busy = readBusy(r)
	}
	libcs.scan(probes, say)
	if ij != nil {
		ij.scan(libcs.seenAt)
	}
	// From now on a process seen is new: started, or executing a program,
	// after the probes were on its allocator.
	aud.begun = true
	// Ready once the probes and the busy reader are, and the processes
	// running are looked at: the first scan takes 7 to 20 ms for 66
	// processes here, and more where more run. Written before it, a
	// process started at once was taken only after it, trapping
	// meanwhile, and one the scan saw counted as running before.
	if flags.ReadyFile != "" {
		if err := writeReadyFile(flags.ReadyFile, os.Getpid()); err != nil {
			return 1, err
		}
	}
	// New processes are looked at for other copies of libc, and the
	// processes gone keep their last figures, this often.
	scan := time.NewTicker(libcScanInterval)
	defer scan.Stop()
	var tick, end <-chan time.Time
	if flags.Interval > 0 {
		t := time.NewTicker(flags.Interval)
		defer t.Stop()
		tick = t.C
	}
	if flags.Duration > 0 {
		end = time.After(flags.Duration)
	}
	final := func() (int, error) {
		if ij != nil {
			ij.stop()
		}
		probes.Detach()
		syncWalks()
		aud.summary(stdout)
		// The losses are in the ranking (aud.summary); what the sampling
		// kept is said beside it.
		if c, err := probes.Counters(); err == nil && flags.SampleBytes > 0 {
			line := sampleLine(c, flags.SampleBytes)
			if ij != nil && ij.total > 0 {
				line += "; the processes given the shim sampled in themselves: their samples count among the allocations sampled, the calls they passed over nowhere"
			}
			fmt.Fprintf(stderr, "mdtrace: %s\n", line)
		}
		return 0, nil
	}
	for scans := 1; ; {
		select {
		case <-tick:
			syncWalks()
			aud.summary(stdout)
		case <-dumps:
			syncWalks()
			aud.dumpAll()
		case f := <-fresh:
			if aud.procs[f.pid] == nil {
				aud.seenWith(f.pid, f.maps)
			}
		case ev := <-busy:
			if ev.soon {
				ij.soon(ev.pid)
			} else {
				ij.busy(ev.pid)
			}
		case <-scan.C:
			libcs.scan(probes, say)
			if ij != nil {
				ij.scan(libcs.seenAt)
			}
			// The gens of processes gone go only once their figures
			// are kept.
			all := scans%auditUnseenScans == 0
			aud.reap(libcs.alive, all)
			if all {
				probes.ForgetExited(processAlive)
			}
			scans++
		case <-end:
			return final()
		case <-sigs:
			return final()
		}
	}
}

// auditDeferLines says what became of the first walks of the processes
// the audit had no list of mappings of yet.
func auditDeferLines(c tracer.Counters, d tracer.DeferCounts) []string {
	var out []string
	if c.DeferLost > 0 {
		out = append(out, fmt.Sprintf("%d backtraces of processes mdtrace had no unwind tables of yet (in their first moments) were walked by frame pointers alone, past the bounds of the walks left to mdtrace (32 a process, 256 a CPU a second): they may end early", c.DeferLost))
	}
	if n := d.Short + d.Gone + d.Stopped; n > 0 {
		out = append(out, fmt.Sprintf("%d backtraces of processes mdtrace had no unwind tables of yet, or not of all their libraries, were left to mdtrace and not finished (%d past the stack kept, %d of processes gone before their maps were read, %d stopped by a rule): they end early", n, d.Short, d.Gone, d.Stopped))
	}
	return out
}

// freshProc is a process the audit heard of by its first walk, with its
// maps as they were then (nil if it had ended).
type freshProc struct {
	pid  int
	maps *stacks.Maps
}

// auditWalks finishes the walks the probes left to mdtrace under --all:
// those of a process it has no list of mappings of yet. The first one of a
// process makes its list (from then on its walks go through its files'
// tables in the probes), and sends it on fresh with its maps, read at
// once for a process that may end in a moment, if there is room.
// sync returns once every walk sent so far is finished.
func auditWalks(probes *tracer.Probes, walks *tracer.DeferReader, fresh chan<- freshProc) (sync, stop func()) {
	handle := func(w *tracer.DeferredWalk) {
		if probes.FinishWalk(w, false) {
			return
		}
		// A process that ended already has no maps: the walk keeps
		// its first frame, counted.
		maps, _ := probes.LoadUnwindMaps(w.PID)
		probes.FinishWalk(w, true)
		select {
		case fresh <- freshProc{w.PID, maps}:
		default:
		}
	}
	sync, stopPump := pump(walks.Next, handle, walks.Wake)
	return sync, func() {
		walks.Close()
		stopPump()
	}
}

// libcScanInterval is how often --all looks for processes on another copy
// of libc, a container's: their allocations before are not counted.
const libcScanInterval = time.Second

// libcFinder finds the copies of glibc's libc that processes map, each
// file once, and the processes it has looked at.
type libcFinder struct {
	probed []os.FileInfo
	// onNew, if not nil, is called for each process started or executed
	// since the last scan; onLate for one whose allocator was probed only
	// then. alive is every process of the last scan.
	onNew, onLate func(pid int)
	alive         map[int]bool
	// sampling is set when the probes sample (--sample-bytes): the
	// batches of a shim preloaded by another mdtrace are then not read.
	// sampleBytes is the interval the figures are weighed with.
	sampling    bool
	sampleBytes uint64
	// seenAt is each process looked at, with its program's file and start
	// time: an exec changes the file, a new process the start time.
	seenAt map[int]procStamp
}

type procStamp struct {
	exe   os.FileInfo
	start string
}

// pricedWhy says why a process is taken at the count said: price, what an
// injection costs, against per, what a call's probe hits cost.
func pricedWhy(price string, per time.Duration) string {
	return fmt.Sprintf("when its probe hits have cost it about what the shim's loading does, %s (a call's hits cost a process %.1f µs here, measured at the start)", price, float64(per)/1e3)
}

// busyEvent is a process the probes tell of: busy (its count of calls
// reached the one at which it is taken), or soon to be.
type busyEvent struct {
	pid  int
	soon bool
}

// readBusy passes on the processes r tells of until r is closed.
func readBusy(r *tracer.BusyReader) <-chan busyEvent {
	c := make(chan busyEvent, 64)
	go func() {
		for {
			pid, soon, err := r.Next(time.Now().Add(time.Second))
			switch {
			case errors.Is(err, tracer.ErrNoRecord):
				continue
			case err != nil:
				return
			}
			select {
			case c <- busyEvent{pid, soon}:
			default:
				// The scan each second finds it.
			}
		}
	}()
	return c
}

// stampOf returns process pid's stamp: its executable and its start
// time. A kernel thread has none.
func stampOf(pid int) (procStamp, error) {
	st, err := tracer.StatFields(pid)
	if err != nil {
		return procStamp{}, err
	}
	if len(st) < 20 {
		return procStamp{}, fmt.Errorf("process %d: a short stat", pid)
	}
	link := fmt.Sprintf("/proc/%d/exe", pid)
	if st[0] == "Z" {
		// Its main thread ended: another thread may show its program.
		link = exeLink(pid)
	}
	exe, err := os.Stat(link)
	if err != nil {
		return procStamp{}, err
	}
	// Field 22 of /proc/PID/stat, the start time, is the 20th after the
	// command's name.
	return procStamp{exe, st[19]}, nil
}

// exeLink is process pid's /proc/PID/exe, or, once its main thread has
// ended while others run on (/proc/PID then shows no program), one of
// theirs.
func exeLink(pid int) string {
	if dir := stacks.LiveTask(pid); dir != "" {
		return dir + "/exe"
	}
	return fmt.Sprintf("/proc/%d/exe", pid)
}

func newLibcFinder(lib stacks.File) *libcFinder {
	f := &libcFinder{seenAt: map[int]procStamp{}}
	if fi, err := os.Stat(lib.Path); err == nil {
		f.probed = append(f.probed, fi)
	}
	return f
}

// scan probes, for every process, the libc of the processes started or
// executed since the last scan, if it is another file than those probed.
func (f *libcFinder) scan(probes *tracer.Probes, say func(string)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	alive := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		alive[pid] = true
		stamp, err := stampOf(pid)
		if err != nil {
			// A kernel thread, or gone.
			continue
		}
		if old, ok := f.seenAt[pid]; ok && sameStamp(old, stamp) {
			continue
		}
		f.seenAt[pid] = stamp
		// Its unwind tables first: from the notice that its allocator
		// is probed on, its backtraces go through its code.
		if f.onNew != nil {
			f.onNew(pid)
		}
		if f.probeLibc(pid, probes, say) && f.onLate != nil {
			f.onLate(pid)
		}
	}
	for pid := range f.seenAt {
		if !alive[pid] {
			delete(f.seenAt, pid)
		}
	}
	f.alive = alive
}

// shimSampling looks, for a process whose allocator is mdtrace's shim
// (preloaded by another mdtrace), whether that shim samples by itself
// (--sample-bytes there): the calls at its sites are a sample already. The
// probes then take each of them instead of sampling them again, from now
// on; the ranking weighs every process's blocks with the audit's interval,
// which is right for this one only when its shim's is the same, and the
// audit says so otherwise.
func (f *libcFinder) shimSampling(pid int, file stacks.File, probes *tracer.Probes, say func(string)) {
	// The file's functions are read once for the file as it is.
	if !tracer.HasShimSites(file.Path) {
		return
	}
	n, err := tracer.ShimSampleBytes(pid, file)
	if err != nil {
		if processAlive(pid) {
			say(fmt.Sprintf("process %d (%s) has mdtrace's shim, whose sampling mdtrace cannot read: %v; if it samples, its figures are wrong", pid, progName(pid), err))
		}
		return
	}
	if err := probes.ShimSamples(pid, n > 0); err != nil {
		say(err.Error())
		return
	}
	if n == 0 {
		return
	}
	prog := progName(pid)
	switch {
	case f.sampleBytes == n:
		say(fmt.Sprintf("the shim of process %d (%s) samples one allocation every %d bytes by itself, as the audit does: the probes take each call it reports from now on, without sampling it again (its calls before the audit looked at it were sampled twice)", pid, prog, n))
	case f.sampleBytes == 0:
		say(fmt.Sprintf("the shim of process %d (%s) samples one allocation every %d bytes by itself: its figures count only the blocks it sampled, below its real ones (--sample-bytes %d weighs them)", pid, prog, n, n))
	case f.sampleBytes != n:
		say(fmt.Sprintf("the shim of process %d (%s) samples one allocation every %d bytes by itself: its blocks are weighed as sampled every %d bytes, so its estimates are off (--sample-bytes %d weighs them right)", pid, prog, n, f.sampleBytes, n))
	}
}

// probeLibc probes the allocator of process pid when it is a file not
// probed yet: a copy of libc (a container's), or another allocator that
// the loader bound malloc to (jemalloc, tcmalloc, one linked into the
// program), found as attach mode finds it. It reports whether the process
// ran on an allocator not probed until now: its allocations before are
// not counted.
func (f *libcFinder) probeLibc(pid int, probes *tracer.Probes, say func(string)) bool {
	file, err := tracer.AllocatorOfRunning(pid)
	if err != nil {
		// A kernel thread, a process gone, or one whose loader has not
		// run yet: its libc, if it maps one.
		var ok bool
		if file, ok = mappedLibc(pid); !ok {
			return false
		}
	}
	fi, err := os.Stat(file.Path)
	if err != nil {
		return false
	}
	// Before the probes go on a shim's file: none of this process's calls
	// may be sampled twice.
	f.shimSampling(pid, file, probes, say)
	if slices.ContainsFunc(f.probed, func(p os.FileInfo) bool { return os.SameFile(p, fi) }) {
		return false
	}
	what := "libc"
	if !strings.HasPrefix(filepath.Base(file.Name), "libc.so.") {
		what = "allocator"
	}
	if err := partialAttach(probes.Attach(0, file), say); err != nil {
		if errors.Is(err, tracer.ErrProcessGone) || !processAlive(pid) {
			// Another process that maps it will say.
			return true
		}
		say(fmt.Sprintf("the %s of process %d (%s), %s, cannot be probed: %v; its processes are not counted", what, pid, progName(pid), file.Name, err))
		f.probed = append(f.probed, fi)
		return true
	}
	f.probed = append(f.probed, fi)
	say(fmt.Sprintf("also auditing every process that uses the %s of process %d (%s), %s, another file than the system's libc: allocations made with it before now are not counted", what, pid, progName(pid), file.Name))
	if f.sampling && tracer.HasShimSites(file.Path) {
		// The probes sample calls one at a time; a batch brings every
		// block of its thread, which the estimates would weigh as
		// samples, so the batches' site stays unprobed.
		say(fmt.Sprintf("%s is mdtrace's shim, preloaded by another mdtrace: the calls its processes batch are not counted while sampling (--sample-bytes 0 counts them)", file.Name))
	}
	return true
}

// mappedLibc is the copy of libc process pid maps, if any.
func mappedLibc(pid int) (stacks.File, bool) {
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return stacks.File{}, false
	}
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		if m.Inode != 0 && strings.HasPrefix(filepath.Base(m.Name()), "libc.so.") {
			return stacks.MappedFile(pid, m), true
		}
	}
	return stacks.File{}, false
}

// trapMeasure is tracer.MeasureTrapCost's answer.
type trapMeasure struct {
	cost tracer.TrapCost
	err  error
}

// ordinal is n as "1st", "2nd", "3rd", "11th", "1999th".
func ordinal(n uint32) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
