//go:build linux

package tracer

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// Sizes of the BPF maps.
const (
	// DefaultMaxAllocs is the default capacity of the live table (--max-allocs).
	DefaultMaxAllocs = 4 << 20
	// MaxMaxAllocs is the most --max-allocs may be: a live table of
	// 5.2 GB of kernel memory, its last tier 5.1 GB made at once.
	MaxMaxAllocs = 1 << 27
	// DefaultMaxStacks is the default number of unique backtraces kept.
	DefaultMaxStacks = 1 << 18
	// DefaultRecordBuffer is the size of the record_allocs ring buffer: at
	// about 5 us per probe hit, a thread makes at most a few MB of records a
	// second, so 32 MiB absorbs several seconds without the reader.
	DefaultRecordBuffer = 32 << 20
)

// Counters are the totals of the BPF counters, a field for each of enum
// counter's in abi/mdtrace_abi.h, in its order.
type Counters struct {
	Allocs         uint64 // allocations added to the live table
	Frees          uint64 // frees of tracked blocks
	UnknownFrees   uint64 // frees of blocks the table did not hold (allocated before the attach)
	TableFull      uint64 // allocations not tracked: the live table was full
	StackFull      uint64 // backtraces lost: the stack map was full
	StackCollision uint64 // backtraces lost: hash collision
	StackError     uint64 // backtraces lost: the kernel could not walk the stack
	StateError     uint64 // calls not seen: no per-thread storage
	MissedReturn   uint64 // calls whose return probe never ran
	Nested         uint64 // allocator calls made by the allocator itself
	UsableSize     uint64 // malloc_usable_size calls (probed with verify_pointers only)
	RecordsLost    uint64 // record_allocs records lost: the ring buffer was full
	NotifyLost     uint64 // library load notices lost: the ring buffer was full
	ErrorsLost     uint64 // verify_pointers errors lost: the ring buffer was full
	ProgramLost    uint64 // program mode: processes not traced, or not reported
	GenLost        uint64 // execs whose program's blocks cannot be told from the one before
	BatchLost      uint64 // batched calls lost: a batch the probes could not read or understand
	OrphansLost    uint64 // frees that came before their block's batch and could not be kept for it
	FreesEarly     uint64 // frees that came before their block's batch, matched when it came (not a loss)
	UnwindStopped  uint64 // backtraces cut short: a frame the unwind tables could not go past
	StackTruncated uint64 // backtraces cut at the frame limit (backtrace=N) with frames left
	Paired         uint64 // batched allocations freed in their own batch: neither call reached the table (not a loss)
	MappingsLost   uint64 // the allocator's own mappings not learnt, or not let go: the ring buffer was full
	UnwindDeferred uint64 // walks stopped at a library not in the process's list yet, handed to mdtrace to finish (not a loss)
	DeferLost      uint64 // walks that could have been handed to mdtrace but for the bound (counted as stopped too)
	Unsampled      uint64 // allocations the probes' sampling passed over (not a loss)
	UnsampledFrees uint64 // frees of blocks the table did not hold while the probes sample (not a loss)
	CallsUncounted uint64 // --all --inject: allocator calls of processes the table of counts had no room for
	UnwindNoList   uint64 // backtraces taken by frame pointers alone, before the process's unwind tables were in place
}

// MaxStackDepth is the most frames a backtrace the probes take can have
// (MAX_STACK_DEPTH in abi/mdtrace_abi.h), Android's most.
const MaxStackDepth = abi.MaxStackDepth

// ProbeConfig sets what the BPF programs record.
type ProbeConfig struct {
	// StackDepth is the number of frames per backtrace; 0 takes none.
	StackDepth int
	// BacktraceMinSize and BacktraceMaxSize bound the sizes that get a
	// backtrace (inclusive); a zero BacktraceMaxSize means no bound.
	BacktraceMinSize, BacktraceMaxSize uint64
	// BacktraceOff starts with backtrace capture off (backtrace_enable_on_signal).
	BacktraceOff bool
	// MaxAllocs is the capacity of the live table; 0 means DefaultMaxAllocs.
	MaxAllocs uint32
	// FirstTable is the room of the live table's first tier (tables.go);
	// 0 means 256K blocks. Tests make it small to see the table grow.
	FirstTable uint32
	// MaxStacks is the number of unique backtraces kept; 0 means DefaultMaxStacks.
	MaxStacks uint32
	// Record sends every allocator call to user space (record_allocs);
	// RecordBufferBytes sizes the ring buffer (a power of two, 0 for
	// DefaultRecordBuffer).
	Record            bool
	RecordBufferBytes uint32
	// NoAllocBacktraces takes no backtraces of allocations even with a
	// StackDepth (which verify_pointers needs for failures and frees).
	NoAllocBacktraces bool
	// NoBatch leaves the shim's batch site unprobed: the shim then
	// reports each call at its other sites. Batches need every block of
	// a process seen from its start (a launched command's).
	NoBatch bool
	// Verify reports bad pointers given to free, realloc and
	// malloc_usable_size (verify_pointers). With UnknownIsError, pointers the
	// table never saw are errors too: only when every allocation was seen.
	Verify, UnknownIsError bool
	// AbortOnError sends SIGABRT to a thread that gives a bad pointer,
	// once its error is in the errors ring buffer, before the function
	// runs (abort_on_error). Only Verify finds errors in the probes: without
	// it, AbortOnError does nothing. Leaks never abort.
	AbortOnError bool
	// PerProbeLinks attaches each probe with its own perf-event link, as on
	// kernels without uprobe_multi links (before 6.6), even where the
	// kernel has them.
	PerProbeLinks bool
	// Preemptible forces the stack walk's preemption guard on or off;
	// nil: on where the running kernel may preempt BPF programs.
	Preemptible *bool
	// UnwindEntries bounds the entries of the unwind tables of the files
	// the traced processes map, shared by all (DefaultUnwindEntries when 0).
	UnwindEntries uint32
	// Program, when set, is program mode: probes attached without a PID
	// count only the processes that execute a program whose file name
	// contains Program, and their children (see WatchPrograms).
	Program string
	// All is --all: probes without a PID for every process, each of
	// whose execs starts a new program whose blocks are the only ones
	// counted (see WatchAllExecs).
	All bool
	// CountCalls, with All, counts each process's calls (ProcCalls), from
	// its exec on; BusyCalls, when not 0, is the count at which a process
	// is told once on the reader WatchBusy returns.
	CountCalls bool
	BusyCalls  uint32
	// EagerHead, when not 0, is the count at which a process is told
	// instead of BusyCalls when its program file was marked eager
	// (MarkEager).
	EagerHead uint32
	// CountedProcesses, when not 0, bounds the processes whose calls are
	// counted at once (MAX_PROCESSES of bpf/common.h, 16384, when 0; the
	// tests make it small): the calls of those past it are counted as
	// CallsUncounted.
	CountedProcesses uint32
	// SampleBytes, when not 0, samples the allocations in the probes, one
	// every SampleBytes bytes on average (bpf/sample.h): the others take no
	// backtrace and no room in the table, and Totals gives estimates. It
	// is for probes on the allocator; a shim that samples by itself sends
	// only its samples.
	SampleBytes uint64
}

// Probes are mdtrace's loaded BPF programs and maps, and the uprobes that
// attach them to processes. Probes are safe for concurrent use.
//
// Loading needs CAP_BPF and CAP_PERFMON (or root); uprobes need kernel 4.17
// or later, task storage 5.11 or later.
type Probes struct {
	// noSessions is set once the kernel refused a uprobe session link
	// (session.go): the probes are made apart from then on.
	noSessions atomic.Bool
	// copiedFrees counts the kept frees a fork child got a copy of
	// (copyOrphans): each is one of the child's frees of a block the table
	// does not hold, which the probes take back when the block's
	// allocation comes (pair_matched), without having counted it.
	copiedFrees atomic.Uint64
	// Unguarded says that the stack walks run without preemption turned
	// off on a preemptible kernel whose verifier refused the guard
	// (before 6.13): two walks on one CPU at once may mix (rare).
	Unguarded bool
	objs      bpf.MdtraceObjects
	// unwind holds the files' unwind tables; nil without backtraces.
	unwind *unwindTables
	// coll holds the data sections behind objs' variables.
	coll       *ebpf.Collection
	stackDepth int
	// sampleBytes is the probes' sampling interval, 0 if they do not sample.
	sampleBytes uint64
	// btMin and btMax bound the sizes that get backtraces; allocBacktraces
	// is the backtrace option (verify_pointers alone takes none).
	btMin, btMax    uint64
	allocBacktraces bool
	// noBatch: the batch site stays unprobed (ProbeConfig.NoBatch, record).
	noBatch     bool
	multi       bool // uprobe_multi links
	record      bool
	verify      bool
	exitLink    link.Link // the thread exit tracepoint, with record
	drainLink   link.Link // the thread exit probe that drains batches
	drainKprobe bool      // drainLink is the kprobe on do_exit, not the tracepoint
	execLink    link.Link // the exec tracepoint that keeps the gens map
	watchLink   link.Link // the exit tracepoint that tells how a watched process ended
	// programLinks are program mode's exec and fork tracepoints.
	programLinks []link.Link

	mu sync.Mutex
	// quiet counts the threads in quiet_threads (Quiet).
	quiet int
	// links are the uprobe links of each process (0: program mode's,
	// attached without a PID).
	links map[int][]link.Link
	// retired are the processes Release let go, cleaned up in batches;
	// cleaning are those of the batch being cleaned up.
	retired  retiring
	cleaning map[int]bool
	// cleanMu is held while retired processes are cleaned up.
	cleanMu sync.Mutex
	// cleaner is the background cleanup, started by the first Release,
	// every retireEvery (retireDelay).
	cleaner     *cleaner
	retireEvery time.Duration
	// closing counts the links being closed in the background.
	closing sync.WaitGroup
	// Attached lists, for each attached process, the entry points probed,
	// and points where in them.
	attached map[int][]string
	points   map[int][]ProbePoint
	// probed holds, for each process, the files Attach has probed: a file
	// named again by another path (the loader's /lib/..., the maps'
	// /usr/lib/...) is not probed twice.
	probed map[int]map[fileID]bool
	// fileLinks are the links of each process's probed files, for
	// DetachFile.
	fileLinks map[int]map[fileID][]link.Link
	// returnLinks are the links of return probes, which Detach closes
	// after the others.
	returnLinks map[link.Link]bool
	// probeOffsets are, for each file probed without a PID filter, the
	// offsets of its probed instructions: what a bypass skips (Bypass).
	probeOffsets map[fileID][]uint64
	// watched holds, for each process, the loaders whose hook is probed.
	watched map[int]map[string]bool
	// early holds, for each process started early, where its shim lists
	// the buffers not registered with the probes yet (early.go).
	early map[int]uint64
	// tables is the live table's tiers, whose entry counts size snapshots
	// before the walk; lastLen is the size of each process's last
	// snapshot, a better guess where the table holds the blocks of many
	// processes.
	tables  *liveTables
	lastLen map[int]int
	// allocMaps are the anonymous mappings each process's allocator made
	// for itself (mappings.go), once traceProcess started to follow them.
	allocMaps *allocatorMappings
	// mappingsErr says why the programs that follow them are not loaded.
	mappingsErr error
	// defers counts the outcomes of the walks the probes left to
	// mdtrace (deferred.go); deferIDs gives the id of each one finished
	// as the probes' walk would have had it (see finishedID). deferMu
	// guards them.
	deferMu  sync.Mutex
	defers   DeferCounts
	deferIDs map[uint64]uint64
	// deferExecs counts each process's execs, which end the walks it
	// left to finish.
	deferExecs map[int]int
}

// SetBacktrace turns backtrace capture on or off while tracing.
func (p *Probes) SetBacktrace(on bool) error {
	return p.objs.BacktraceOn.Set(boolU32(on))
}

// Close detaches the probes and frees the programs and maps.
func (p *Probes) Close() error {
	p.Detach()
	p.stopMappings()
	if p.tables != nil {
		p.tables.close()
	}
	if p.unwind != nil {
		p.unwind.closePool()
	}
	err := p.objs.Close()
	if p.coll != nil {
		p.coll.Close()
	}
	return err
}

// Counters returns the BPF counters summed over all CPUs.
func (p *Probes) Counters() (Counters, error) {
	var vals [abi.CounterMax]uint64
	for i := range vals {
		var per []uint64
		if err := p.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return Counters{}, fmt.Errorf("reading counter %d: %w", i, err)
		}
		for _, v := range per {
			vals[i] += v
		}
	}
	// The walks mdtrace finished for the probes count as theirs.
	c := countersOf(&vals)
	c.UnknownFrees += p.copiedFrees.Load()
	d := p.DeferredCounts()
	c.UnwindStopped += d.Stopped + d.Short + d.Gone
	c.StackTruncated += d.Cut
	return c, nil
}

// countersOf is Counters from the totals of the counters map.
func countersOf(vals *[abi.CounterMax]uint64) Counters {
	return Counters{
		Allocs:         vals[abi.CounterAllocs],
		Frees:          vals[abi.CounterFrees],
		UnknownFrees:   vals[abi.CounterUnknownFrees],
		TableFull:      vals[abi.CounterTableFull],
		StackFull:      vals[abi.CounterStackFull],
		StackCollision: vals[abi.CounterStackCollision],
		StackError:     vals[abi.CounterStackError],
		StateError:     vals[abi.CounterStateError],
		MissedReturn:   vals[abi.CounterMissedReturn],
		Nested:         vals[abi.CounterNested],
		UsableSize:     vals[abi.CounterUsableSize],
		RecordsLost:    vals[abi.CounterRecordsLost],
		NotifyLost:     vals[abi.CounterNotifyLost],
		ErrorsLost:     vals[abi.CounterErrorsLost],
		ProgramLost:    vals[abi.CounterProgramLost],
		GenLost:        vals[abi.CounterGenLost],
		BatchLost:      vals[abi.CounterBatchLost],
		OrphansLost:    vals[abi.CounterOrphansLost],
		FreesEarly:     vals[abi.CounterFreesEarly],
		UnwindStopped:  vals[abi.CounterUnwindStopped],
		StackTruncated: vals[abi.CounterStackTruncated],
		Paired:         vals[abi.CounterPaired],
		MappingsLost:   vals[abi.CounterMappingsLost],
		UnwindDeferred: vals[abi.CounterUnwindDeferred],
		DeferLost:      vals[abi.CounterUnwindDeferLost],
		Unsampled:      vals[abi.CounterUnsampled],
		UnsampledFrees: vals[abi.CounterUnsampledFrees],
		CallsUncounted: vals[abi.CounterCallsUncounted],
		UnwindNoList:   vals[abi.CounterUnwindNoList],
	}
}

// formatCount renders n with thousands separators for messages.
func formatCount(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// UnguardedNote is what mdtrace says when the probes are Unguarded.
const UnguardedNote = "this preemptible kernel's verifier refuses the programs with preemption turned off around a stack walk: the walks run without it, and two taken on one CPU at once may mix (rarely)"
