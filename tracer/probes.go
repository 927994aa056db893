//go:build linux

package tracer

import (
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/leak"
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

// Counter indexes; they mirror enum counter in bpf/common.h.
const (
	counterAllocs = iota
	counterFrees
	counterUnknownFrees
	counterTableFull
	counterStackFull
	counterStackCollision
	counterStackError
	counterStateError
	counterMissedReturn
	counterNested
	counterUsableSize
	counterRecordsLost
	counterNotifyLost
	counterErrorsLost
	counterProgramLost
	counterGenLost
	counterBatchLost
	counterOrphansLost
	counterFreesEarly
	counterMax
)

// Counters are the totals of the BPF counters.
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
}

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
	// Program, when set, is program mode: probes attached without a PID
	// count only the processes that execute a program whose file name
	// contains Program, and their children (see WatchPrograms).
	Program string
}

// Probes are mdtrace's loaded BPF programs and maps, and the uprobes that
// attach them to processes. Probes are safe for concurrent use.
//
// Loading needs CAP_BPF and CAP_PERFMON (or root); uprobes need kernel 4.17
// or later, task storage 5.11 or later.
type Probes struct {
	objs bpf.MdtraceObjects
	// coll holds the data sections behind objs' variables.
	coll       *ebpf.Collection
	stackDepth int
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
	// programLinks are program mode's exec and fork tracepoints.
	programLinks []link.Link

	mu sync.Mutex
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
	// watched holds, for each process, the loaders whose hook is probed.
	watched map[int]map[string]bool
	// tables is the live table's tiers, whose entry counts size snapshots
	// before the walk; lastLen is the size of each process's last
	// snapshot, a better guess where the table holds the blocks of many
	// processes.
	tables  *liveTables
	lastLen map[int]int
}

// LoadProbes loads the BPF programs and maps into the kernel.
func LoadProbes(cfg ProbeConfig) (*Probes, error) {
	if cfg.StackDepth < 0 || cfg.StackDepth > MaxBacktraceFrames {
		return nil, fmt.Errorf("backtrace depth %d out of range 0..%d", cfg.StackDepth, MaxBacktraceFrames)
	}
	if cfg.MaxAllocs == 0 {
		cfg.MaxAllocs = DefaultMaxAllocs
	}
	if cfg.MaxAllocs > MaxMaxAllocs {
		return nil, fmt.Errorf("live table capacity %d over the most, %d", cfg.MaxAllocs, MaxMaxAllocs)
	}
	if cfg.MaxStacks == 0 {
		cfg.MaxStacks = DefaultMaxStacks
	}
	if cfg.BacktraceMaxSize == 0 {
		cfg.BacktraceMaxSize = math.MaxUint64
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("removing the memlock limit: %w", err)
	}
	spec, err := bpf.LoadMdtrace()
	if err != nil {
		return nil, fmt.Errorf("reading the BPF programs: %w", err)
	}
	vars := map[string]any{
		"stack_depth":      uint32(cfg.StackDepth),
		"bt_min_size":      cfg.BacktraceMinSize,
		"bt_max_size":      cfg.BacktraceMaxSize,
		"page_size":        uint64(os.Getpagesize()),
		"backtrace_on":     boolU32(!cfg.BacktraceOff),
		"record":           boolU32(cfg.Record),
		"verify":           boolU32(cfg.Verify),
		"alloc_backtraces": boolU32(!cfg.NoAllocBacktraces),
		"unknown_is_error": boolU32(cfg.UnknownIsError),
		"abort_on_error":   boolU32(cfg.AbortOnError),
	}
	if cfg.Preemptible != nil {
		vars["preemptible"] = boolU32(*cfg.Preemptible)
	} else {
		vars["preemptible"] = boolU32(kernelPreempts())
	}
	if cfg.Program != "" {
		if len(cfg.Program) >= MaxProgramName {
			return nil, fmt.Errorf("program name %q longer than %d bytes", cfg.Program, MaxProgramName-1)
		}
		var name [MaxProgramName]byte
		copy(name[:], cfg.Program)
		vars["only_traced"] = uint32(1)
		vars["program_len"] = uint32(len(cfg.Program))
		vars["program_name"] = name
		// Children forked by traced processes are zygote children.
		vars["have_zygotes"] = uint32(1)
	}
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}
	if cfg.RecordBufferBytes == 0 {
		cfg.RecordBufferBytes = DefaultRecordBuffer
	}
	if !cfg.Record {
		// Nothing is recorded: the smallest ring buffer, a page, instead
		// of 32 MiB of locked kernel memory.
		cfg.RecordBufferBytes = uint32(os.Getpagesize())
	}
	spec.Maps["records"].MaxEntries = cfg.RecordBufferBytes
	if err := spec.Variables["record_wakeup_bytes"].Set(uint64(cfg.RecordBufferBytes / 4)); err != nil {
		return nil, fmt.Errorf("setting record_wakeup_bytes: %w", err)
	}
	first := cfg.FirstTable
	if first == 0 {
		first = firstTier
	}
	tiers := tierSizes(cfg.MaxAllocs, first)
	spec.Maps["allocs"].MaxEntries = tierBuckets(tiers[0])
	nb, at := tierVars(spec.Maps["allocs"].MaxEntries)
	if err := spec.Variables["tier_buckets"].Set(nb); err != nil {
		return nil, fmt.Errorf("setting tier_buckets: %w", err)
	}
	if err := spec.Variables["tier_filling_at"].Set(at); err != nil {
		return nil, fmt.Errorf("setting tier_filling_at: %w", err)
	}
	tierSpec := spec.Maps["allocs"].Copy()
	// The tables map's template of a tier is made and dropped at once:
	// the room of a tier is not part of its type.
	spec.Maps["tables"].InnerMap.MaxEntries = 1
	spec.Maps["stacks"].MaxEntries = cfg.MaxStacks
	// A stack is its frames, ended by a zero when there are fewer.
	depth := cfg.StackDepth
	if depth == 0 {
		depth = 1
	}
	spec.Maps["stacks"].ValueSize = uint32(8 * depth)

	p := &Probes{
		stackDepth: cfg.StackDepth, record: cfg.Record, verify: cfg.Verify,
		btMin: cfg.BacktraceMinSize, btMax: cfg.BacktraceMaxSize, allocBacktraces: !cfg.NoAllocBacktraces,
		noBatch: cfg.NoBatch || cfg.Record,
		links:   map[int][]link.Link{}, attached: map[int][]string{}, points: map[int][]ProbePoint{},
		probed: map[int]map[fileID]bool{}, watched: map[int]map[string]bool{},
		retireEvery: retireDelay,
	}
	if !cfg.PerProbeLinks && features.HaveBPFLinkUprobeMulti() == nil {
		p.multi = true
		spec.Programs["alloc_entry"].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs["alloc_return"].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs["alloc_site"].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs["libraries_changed"].AttachType = ebpf.AttachTraceUprobeMulti
	}
	if err := p.load(spec, cfg.Program != ""); err != nil {
		// A kernel without a feature the programs need is said as
		// such, not as the verifier's or the loader's words. The
		// features are probed only then: the probes cost more than a
		// start-up should.
		if ferr := CheckKernel(); ferr != nil {
			return nil, ferr
		}
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, &VerifierError{Release: KernelRelease(), Err: verr}
		}
		return nil, fmt.Errorf("loading the BPF programs: %w", err)
	}
	p.tables, err = newLiveTables(tableObjects{
		outer: p.objs.Tables, first: p.objs.Allocs, moves: p.objs.TierMoves, blocks: p.objs.TierBlocks,
		top: p.objs.TopTable, filling: p.objs.TierFilling, buckets: p.objs.TierBuckets, at: p.objs.TierFillingAt,
	}, tierSpec, tiers)
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// programMode are the programs only program mode loads: the verifier takes
// tens of milliseconds over them, which other modes need not wait for.
var programMode = []string{"program_exec", "program_fork"}

// siteGroup are the programs verified on their own, beside the others: the
// verifier takes about as long over alloc_site as over all the rest.
var siteGroup = []string{"alloc_site"}

// load loads the BPF objects into p.objs: every map and variable, and the
// programs, with program mode's only for program mode (else they stay nil).
//
// It overlaps what it can, as mdtrace's start is the traced command's
// wait: the kernel creates the maps (the live table's buckets alone take
// 40 ms for the default 4M entries) while mdtrace reads the kernel's BTF
// for the CO-RE relocations (15 ms), and the programs are verified in two
// groups at once, on two CPUs where there are.
//
// On an error nothing stays loaded.
func (p *Probes) load(spec *ebpf.CollectionSpec, programs bool) (err error) {
	cache := btf.NewCache()
	warmed := make(chan struct{})
	go func() {
		defer close(warmed)
		if k, err := cache.Kernel(); err == nil {
			var task *btf.Struct
			k.TypeByName("task_struct", &task)
		}
	}()
	mapsOnly := spec.Copy()
	mapsOnly.Programs = map[string]*ebpf.ProgramSpec{}
	coll, err := ebpf.NewCollection(mapsOnly)
	<-warmed
	if err != nil {
		return err
	}
	// The data sections (.bss, .data, .rodata) back the variables: the
	// collection keeps them until Close.
	p.coll = coll
	defer func() {
		if err != nil {
			p.objs.Close()
			coll.Close()
			p.coll = nil
		}
	}()
	replace := maps.Clone(coll.Maps)
	if err := coll.Assign(&p.objs.MdtraceMaps); err != nil {
		return err
	}
	if err := coll.Assign(&p.objs.MdtraceVariables); err != nil {
		return err
	}
	opts := ebpf.CollectionOptions{MapReplacements: replace, Cache: cache}
	var progs [2]map[string]*ebpf.Program
	var errs [3]error
	var wg sync.WaitGroup
	// An update of a map of maps waits for an RCU grace period, 10 to 20
	// ms here: the first tier goes into the tables map while the verifier
	// works.
	wg.Go(func() {
		if err := p.objs.Tables.Put(uint32(0), p.objs.Allocs); err != nil {
			errs[2] = fmt.Errorf("putting the live table's first tier in place: %w", err)
		}
	})
	for i, want := range []func(string) bool{
		func(name string) bool { return slices.Contains(siteGroup, name) },
		func(name string) bool {
			return !slices.Contains(siteGroup, name) && (programs || !slices.Contains(programMode, name))
		},
	} {
		group := spec.Copy()
		maps.DeleteFunc(group.Programs, func(name string, _ *ebpf.ProgramSpec) bool { return !want(name) })
		wg.Go(func() {
			c, err := ebpf.NewCollectionWithOptions(group, opts)
			if err != nil {
				errs[i] = err
				return
			}
			progs[i] = c.Programs
			// The programs hold the maps; the collection's clones of them go.
			c.Programs = nil
			c.Close()
		})
	}
	wg.Wait()
	loaded := map[string]*ebpf.Program{}
	for i := range progs {
		maps.Copy(loaded, progs[i])
	}
	if err := errors.Join(errs[:]...); err != nil {
		for _, prog := range loaded {
			prog.Close()
		}
		return err
	}
	return assignPrograms(&p.objs.MdtracePrograms, loaded)
}

// assignPrograms sets each field of dst to the program its ebpf tag names,
// nil where loaded has none.
func assignPrograms(dst *bpf.MdtracePrograms, loaded map[string]*ebpf.Program) error {
	v := reflect.ValueOf(dst).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("ebpf")
		if prog, ok := loaded[name]; ok {
			v.Field(i).Set(reflect.ValueOf(prog))
			delete(loaded, name)
		}
	}
	if len(loaded) > 0 {
		return fmt.Errorf("programs %v have no place in the objects", slices.Collect(maps.Keys(loaded)))
	}
	return nil
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Allocator calls; they mirror enum call in bpf/common.h and are the
// attach cookies of the entry probe.
const (
	callMalloc = iota + 1
	callCalloc
	callRealloc
	callReallocarray
	callMemalign
	callPosixMemalign
	callValloc
	callPvalloc
	callFree
	callUsableSize
	callNewAligned // operator new(size_t, align_val_t)
	callDelete     // operator delete, with a return probe
	callRuntimeNew // a C++ runtime's operator new on another file's malloc: entry only
	callThreadEnd  // glibc's __call_tls_dtors, where a thread's end begins: entry only
)

// entryPoint is one allocator function and how it is traced.
type entryPoint struct {
	symbol   string
	call     uint64 // the entry probe's cookie
	ret      bool   // also a return probe
	required bool   // attaching fails without it
	args     int    // its arguments, which the entry probe reads
}

// use is what the entry probe of ep reads (see probePoint): free's and
// operator delete's ignore a null pointer. With verify, the pointers it
// checks must reach it before the function reads through them.
func (ep entryPoint) use(verify bool) entryUse {
	return entryUse{
		args:        ep.args,
		nullSkipped: ep.call == callFree || ep.call == callDelete,
		noDeref:     verify,
		stackMoves:  ep.call == callRuntimeNew,
	}
}

// name is how mdtrace names ep to the user: a C++ operator by its C++ name.
func (ep entryPoint) name() string {
	switch {
	case strings.HasPrefix(ep.symbol, "_Znw"):
		return "operator new"
	case strings.HasPrefix(ep.symbol, "_Zna"):
		return "operator new[]"
	case strings.HasPrefix(ep.symbol, "_Zdl"):
		return "operator delete"
	case strings.HasPrefix(ep.symbol, "_Zda"):
		return "operator delete[]"
	}
	return ep.symbol
}

// entryPoints are the allocator's functions. Functions exported at one
// address (memalign and aligned_alloc in glibc 2.36) are probed once.
var entryPoints = []entryPoint{
	{"malloc", callMalloc, true, true, 1},
	{"free", callFree, false, true, 1},
	{"calloc", callCalloc, true, true, 2},
	{"realloc", callRealloc, true, true, 2},
	{"reallocarray", callReallocarray, true, false, 3},
	{"posix_memalign", callPosixMemalign, true, false, 3},
	{"memalign", callMemalign, true, false, 2},
	{"aligned_alloc", callMemalign, true, false, 2},
	{"valloc", callValloc, true, false, 1},
	{"pvalloc", callPvalloc, true, false, 1},
	{"malloc_usable_size", callUsableSize, false, false, 1},
	// With verify, where a thread's end begins: glibc then frees its
	// thread cache through free (see thread_cache_free in the BPF).
	{"__call_tls_dtors", callThreadEnd, false, false, 0},
	// C++'s operators, where the allocator defines its own (jemalloc,
	// tcmalloc) and they need not call malloc or free. Blocks are
	// counted once however they call each other or malloc and free: an
	// operator delete has a return probe, so that a free inside it is
	// seen to be nested. The sized and nothrow forms take more arguments.
	{"_Znwm", callMalloc, true, false, 1},
	{"_Znam", callMalloc, true, false, 1},
	{"_ZnwmRKSt9nothrow_t", callMalloc, true, false, 2},
	{"_ZnamRKSt9nothrow_t", callMalloc, true, false, 2},
	{"_ZnwmSt11align_val_t", callNewAligned, true, false, 2},
	{"_ZnamSt11align_val_t", callNewAligned, true, false, 2},
	{"_ZnwmSt11align_val_tRKSt9nothrow_t", callNewAligned, true, false, 3},
	{"_ZnamSt11align_val_tRKSt9nothrow_t", callNewAligned, true, false, 3},
	{"_ZdlPv", callDelete, true, false, 1},
	{"_ZdaPv", callDelete, true, false, 1},
	{"_ZdlPvm", callDelete, true, false, 2},
	{"_ZdaPvm", callDelete, true, false, 2},
	{"_ZdlPvRKSt9nothrow_t", callDelete, true, false, 2},
	{"_ZdaPvRKSt9nothrow_t", callDelete, true, false, 2},
	{"_ZdlPvSt11align_val_t", callDelete, true, false, 2},
	{"_ZdaPvSt11align_val_t", callDelete, true, false, 2},
	{"_ZdlPvmSt11align_val_t", callDelete, true, false, 3},
	{"_ZdaPvmSt11align_val_t", callDelete, true, false, 3},
	{"_ZdlPvSt11align_val_tRKSt9nothrow_t", callDelete, true, false, 3},
	{"_ZdaPvSt11align_val_tRKSt9nothrow_t", callDelete, true, false, 3},
}

// runtimeNews are the forms of operator new probed in a C++ runtime that
// gets its memory from another file's malloc (glibc's libstdc++), for
// backtraces only: its operator new keeps no frame pointer, so the
// backtrace taken where malloc returns into it misses the function that
// called new. An entry probe notes new's return address and frame pointer,
// and the allocation call inside new starts its backtrace from them. Its
// deletes only call free.
var runtimeNews = func() []entryPoint {
	var out []entryPoint
	for _, ep := range entryPoints {
		if strings.HasPrefix(ep.symbol, "_Zn") {
			out = append(out, entryPoint{ep.symbol, callRuntimeNew, false, false, ep.args})
		}
	}
	return out
}()

// probedHere reports whether Attach probes the function name of a file
// with the functions offsets as an allocator.
func probedHere(name string, offsets map[string]funcSym) bool {
	_, defined := offsets[name]
	return defined && slices.ContainsFunc(entryPoints, func(ep entryPoint) bool { return ep.symbol == name })
}

// IsCxxRuntime reports whether the file at path is a C++ runtime library
// that defines operator new (libstdc++, libc++, or libc++abi where libc++
// leaves new to it), whose news Attach probes for backtraces (see
// runtimeNews). The shim's hand-over (shim/cxx.c) knows the same names.
func IsCxxRuntime(path string) bool {
	base := filepath.Base(path)
	return (strings.HasPrefix(base, "libstdc++.so") || strings.HasPrefix(base, "libc++.so") ||
		strings.HasPrefix(base, "libc++abi.so")) && DefinesNew(path)
}

// DefinesNew reports whether the ELF file at path defines C++'s operator
// new, as the shim, jemalloc and tcmalloc do.
func DefinesNew(path string) bool {
	offsets, err := funcOffsets(path)
	_, ok := offsets["_Znwm"]
	return err == nil && ok
}

// Cookies of the shim's probe sites; they mirror enum site in
// bpf/mdtrace.bpf.c.
const (
	siteAlloc = iota + 1
	siteFree
	siteBatch
)

// shimSites are the probe sites of the shim (shim/site.c): functions that
// start with a 5-byte NOP, which the kernel probes without a trap, and that
// the shim calls with a call's result and arguments. Where a library has
// them, they replace every entry and return probe.
var shimSites = []entryPoint{
	{"mdshim_site_alloc", siteAlloc, false, true, 5},
	{"mdshim_site_free", siteFree, false, true, 2},
	{"mdshim_site_batch", siteBatch, false, false, 4},
}

// hasShimSites reports whether a library's functions include the shim's
// probe sites.
func hasShimSites(offsets map[string]funcSym) bool {
	for _, ep := range shimSites {
		if _, ok := offsets[ep.symbol]; !ok && ep.required {
			return false
		}
	}
	return true
}

// AttachError reports entry points that could not be probed. Tracing goes
// on without them; the caller reports them to the user.
type AttachError struct {
	Failed []string // "symbol: reason"
}

func (e *AttachError) Error() string {
	return fmt.Sprintf("could not probe %d allocator functions: %s", len(e.Failed), strings.Join(e.Failed, "; "))
}

// probeSite is one address to probe.
type probeSite struct {
	entryPoint
	offset uint64
}

// Attach puts the probes on the allocator in the ELF file lib for process
// pid only: other processes that map the same file pay nothing. A file
// already probed for pid, by whatever path, is left as it is. It fails
// when malloc, free, calloc or realloc cannot be probed; an *AttachError
// lists optional functions that could not be. When lib is mdtrace's shim,
// its two probe sites are probed instead of the allocator's functions. When
// lib is a C++ runtime that defines operator new but not malloc, only its
// news are probed, for backtraces (see runtimeNews), and only when
// backtraces are taken; the process's Attached list stays the allocator's.
//
// Where the kernel has uprobe_multi links (6.6), all entry probes form one
// link and all return probes another, so that attaching and detaching
// cost two kernel grace periods instead of one per probe. A function's
// probe goes past its prologue where the kernel then emulates the probed
// instruction instead of single-stepping it (probePoint).
func (p *Probes) Attach(pid int, lib string) error {
	p.reclaim(pid)
	id, identified := statID(lib)
	p.mu.Lock()
	again := identified && p.probed[pid][id]
	p.mu.Unlock()
	if again {
		return nil
	}
	offsets, err := funcOffsets(lib)
	if err != nil {
		return err
	}
	ex, err := link.OpenExecutable(lib)
	if err != nil {
		return fmt.Errorf("opening %s: %w", lib, err)
	}
	var (
		sites  []probeSite
		points []ProbePoint
		names  []string
		done   = map[uint64]bool{}
		eps    = entryPoints
		prog   = p.objs.AllocEntry
	)
	_, hasMalloc := offsets["malloc"]
	_, hasNew := offsets["_Znwm"]
	switch {
	case hasShimSites(offsets):
		eps, prog = shimSites, p.objs.AllocSite
		// Without the probe that drains a thread's batch at its end,
		// the batch site stays unprobed: the shim then reports each
		// call at the other sites.
		if p.noBatch || !p.batchReady() {
			eps = shimSites[:2]
		}
	case !hasMalloc && hasNew:
		// A C++ runtime on another allocator: its operator new, for
		// backtraces only.
		if p.stackDepth == 0 {
			return nil
		}
		eps = runtimeNews
	}
	for _, ep := range eps {
		// malloc_usable_size changes nothing; only verify_pointers
		// checks its pointer. Some programs call it for every block:
		// without verify_pointers, it costs them no probe.
		if (ep.call == callUsableSize || ep.call == callThreadEnd) && !p.verify {
			continue
		}
		fs, ok := offsets[ep.symbol]
		if !ok {
			if ep.required {
				return fmt.Errorf("%s has no %s function", lib, ep.symbol)
			}
			continue
		}
		if !slices.Contains(names, ep.name()) && ep.call != callThreadEnd {
			names = append(names, ep.name())
		}
		// Functions exported at one address are probed once.
		if done[fs.off] {
			continue
		}
		done[fs.off] = true
		off := fs.off
		var pl placement
		if prog == p.objs.AllocEntry {
			pl = entryPlacement(lib, fs, ep.use(p.verify))
			off = pl.off
		}
		switch {
		// A runtime's new that only jumps to another new (new[] to
		// new) adds nothing: the other's probe sees the same caller.
		case ep.call == callRuntimeNew && pl.thunk:
			continue
		// Nor does an allocator's operator that only jumps to another
		// function probed here (jemalloc's delete[] to free): the call
		// is counted there, once.
		case strings.HasPrefix(ep.symbol, "_Z") && pl.thunk && probedHere(pl.target, offsets):
			continue
		// Nor a runtime's new whose probe would be single-stepped: its
		// block keeps the runtime's frame rather than cost every call
		// 9 us.
		case ep.call == callRuntimeNew && pl.stepped:
			continue
		}
		// Past a "sub $n,%rsp" (libstdc++'s nothrow forms), a runtime's
		// new finds the entry's stack pointer n bytes up: n goes in the
		// cookie's high half.
		if ep.call == callRuntimeNew {
			ep.call |= pl.delta << 32
		}
		if prog == p.objs.AllocEntry && ep.call == callFree {
			// With record_allocs (its end time) and verify_pointers
			// (its place in nested calls), free gets a return probe.
			ep.ret = p.record || p.verify
			// With verify, free's probe knows the extent of its own
			// code, to tell the allocator's calls of free from the
			// program's.
			if p.verify {
				ep.call |= callerPages(pl) << 32
			}
		}
		sites = append(sites, probeSite{ep, off})
		if prog == p.objs.AllocEntry {
			points = append(points, ProbePoint{ep.symbol, off - fs.off, pl.inst, pl.stepped})
		}
	}
	// Before a delete can be hit, free must know to look for one in flight.
	if slices.ContainsFunc(sites, func(s probeSite) bool { return s.call == callDelete }) {
		if err := p.objs.HaveDeletes.Set(uint32(1)); err != nil {
			return fmt.Errorf("setting have_deletes: %w", err)
		}
	}
	var (
		links  []link.Link
		failed []string
	)
	if p.multi {
		links, err = p.attachMulti(ex, pid, prog, sites)
	} else {
		links, failed, err = p.attachEach(ex, pid, prog, sites)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
			return fmt.Errorf("probing %s: %w", lib, ErrProcessGone)
		}
		return fmt.Errorf("probing %s: %w", lib, err)
	}
	if err := p.traceProcess(pid); err != nil {
		closeLinks(links)
		return err
	}
	p.mu.Lock()
	p.links[pid] = append(p.links[pid], links...)
	if identified {
		if p.probed[pid] == nil {
			p.probed[pid] = map[fileID]bool{}
		}
		p.probed[pid][id] = true
	}
	if hasMalloc {
		p.attached[pid] = names
		p.points[pid] = points
	}
	p.mu.Unlock()
	if len(failed) > 0 {
		return &AttachError{Failed: failed}
	}
	return nil
}

// BatchDepth reports whether the probes take the shim's batches (not with
// NoBatch, nor with record_allocs, whose records go one call at a time
// with its times), and the frames each batched allocation carries.
func (p *Probes) BatchDepth() (int, bool) {
	return p.stackDepth, p.objs.BatchDrain != nil && !p.noBatch
}

// batchReady attaches, the first time, the probe at the end of every
// thread that hands what a thread's batch still holds to the table
// (batch_drain); it reports whether it is attached.
func (p *Probes) batchReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drainLink != nil {
		return true
	}
	if p.objs.BatchDrain == nil {
		return false
	}
	// At the entry of do_exit the thread's memory is there on every
	// kernel; the exit tracepoint comes after the kernel let go of it on
	// older ones (6.1), and serves where kprobes cannot be used.
	l, err := link.Kprobe("do_exit", p.objs.BatchDrainKprobe, nil)
	p.drainKprobe = err == nil
	if err != nil {
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exit", Program: p.objs.BatchDrain})
	}
	if err != nil {
		return false
	}
	p.drainLink = l
	return true
}

// traceProcess enters pid in the traced processes, for the exec
// tracepoint (which tells its programs' blocks apart) and, with record, the
// thread exit one; it attaches those tracepoints the first time.
func (p *Probes) traceProcess(pid int) error {
	if err := p.objs.Traced.Put(uint32(pid), uint32(1)); err != nil {
		return fmt.Errorf("tracing process %d: %w", pid, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	// Raw tracepoints need no tracefs.
	if p.execLink == nil {
		p.execLink, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: p.objs.ExecGen})
		if err != nil {
			return fmt.Errorf("attaching the exec tracepoint: %w", err)
		}
	}
	if p.record && p.exitLink == nil {
		p.exitLink, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exit", Program: p.objs.ThreadExit})
		if err != nil {
			return fmt.Errorf("attaching the thread exit tracepoint: %w", err)
		}
	}
	return nil
}

// attachMulti attaches every site with two uprobe_multi links.
func (p *Probes) attachMulti(ex *link.Executable, pid int, prog *ebpf.Program, sites []probeSite) ([]link.Link, error) {
	var entry, ret link.UprobeMultiOptions
	entry.PID, ret.PID = uint32(pid), uint32(pid)
	for _, s := range sites {
		entry.Addresses = append(entry.Addresses, s.offset)
		entry.Cookies = append(entry.Cookies, s.call)
		if s.ret {
			ret.Addresses = append(ret.Addresses, s.offset)
		}
	}
	el, err := ex.UprobeMulti(nil, prog, &entry)
	if err != nil {
		return nil, err
	}
	if len(ret.Addresses) == 0 {
		return []link.Link{el}, nil
	}
	rl, err := ex.UretprobeMulti(nil, p.objs.AllocReturn, &ret)
	if err != nil {
		el.Close()
		return nil, err
	}
	return []link.Link{el, rl}, nil
}

// attachEach attaches every site with its own perf-event uprobes, for
// kernels without uprobe_multi. Optional functions that fail are listed.
func (p *Probes) attachEach(ex *link.Executable, pid int, prog *ebpf.Program, sites []probeSite) ([]link.Link, []string, error) {
	var (
		links  []link.Link
		failed []string
	)
	for _, s := range sites {
		opts := &link.UprobeOptions{Address: s.offset, PID: pid, Cookie: s.call}
		l, err := ex.Uprobe(s.symbol, prog, opts)
		if err == nil && s.ret {
			links = append(links, l)
			l, err = ex.Uretprobe(s.symbol, p.objs.AllocReturn, opts)
		}
		if err != nil {
			if s.required || errors.Is(err, os.ErrNotExist) || errors.Is(err, errESRCH) {
				closeLinks(links)
				return nil, nil, fmt.Errorf("%s: %w", s.symbol, err)
			}
			failed = append(failed, s.symbol+": "+err.Error())
			continue
		}
		links = append(links, l)
	}
	return links, failed, nil
}

// funcSym is a function of an ELF file: its file offset, as uprobes take
// it, and its size.
type funcSym struct {
	off, size uint64
}

// funcOffsets returns the defined functions of an ELF file, from .dynsym
// and .symtab. The answer is remembered for the file as it is (its
// identity, size and times): every process of a build maps the same libc.
// Callers must not modify it.
func funcOffsets(path string) (map[string]funcSym, error) {
	offs, _, err := fromFile(funcCache, path, byID, func() (map[string]funcSym, error) {
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		defer fh.Close()
		return readFuncOffsets(fh, path)
	})
	return offs, err
}

// funcNamed returns the function symbol of the ELF file at path.
func funcNamed(path, symbol string) (funcSym, error) {
	offs, err := funcOffsets(path)
	if err != nil {
		return funcSym{}, err
	}
	fs, ok := offs[symbol]
	if !ok {
		return funcSym{}, fmt.Errorf("%s has no %s", path, symbol)
	}
	return fs, nil
}

// readFuncOffsets reads the defined functions of the ELF file in fh. A
// malformed file is an error: debug/elf's panics are recovered.
func readFuncOffsets(fh *os.File, path string) (_ map[string]funcSym, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reading %s: malformed ELF file: %v", path, p)
		}
	}()
	f, err := elf.NewFile(fh)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s is not an x86-64 ELF file: %w", path, ErrNot64Bit)
	}
	syms, _ := f.DynamicSymbols()
	st, _ := f.Symbols()
	syms = append(syms, st...)
	out := map[string]funcSym{}
	for _, s := range syms {
		name, ok := definedFunc(s)
		if !ok {
			continue
		}
		if _, ok := out[name]; ok {
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_LOAD && prog.Flags&elf.PF_X != 0 &&
				prog.Vaddr <= s.Value && s.Value < prog.Vaddr+prog.Memsz {
				out[name] = funcSym{s.Value - prog.Vaddr + prog.Off, s.Size}
				break
			}
		}
	}
	return out, nil
}

// definedFunc returns the name, without its version, of a function an ELF
// file defines; ok is false for other symbols.
func definedFunc(s elf.Symbol) (name string, ok bool) {
	t := elf.ST_TYPE(s.Info)
	if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Section == elf.SHN_UNDEF || s.Value == 0 {
		return "", false
	}
	name, _, _ = strings.Cut(s.Name, "@")
	return name, true
}

// ProbePoint is where the entry probe of an allocator function went: its
// offset from the function's entry, the instruction there, and whether the
// kernel single-steps it (a second trap each call).
type ProbePoint struct {
	Symbol  string
	Offset  uint64
	Inst    string
	Stepped bool
}

func (pt ProbePoint) String() string {
	s := fmt.Sprintf("%s+%d (%s)", pt.Symbol, pt.Offset, pt.Inst)
	if pt.Stepped {
		s += " single-stepped"
	}
	return s
}

// ProbePoints returns where the allocator functions of pid are probed (not
// the shim's sites, which the kernel calls into without a trap).
func (p *Probes) ProbePoints(pid int) []ProbePoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.points[pid])
}

// Attached returns the allocator functions probed for pid.
func (p *Probes) Attached(pid int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.attached[pid]...)
}

// SetBacktrace turns backtrace capture on or off while tracing.
func (p *Probes) SetBacktrace(on bool) error {
	return p.objs.BacktraceOn.Set(boolU32(on))
}

// Detach removes the uprobes; the maps stay readable until Close.
func (p *Probes) Detach() {
	p.mu.Lock()
	links := p.programLinks
	for _, l := range p.links {
		links = append(links, l...)
	}
	p.programLinks = nil
	for _, l := range []*link.Link{&p.exitLink, &p.execLink, &p.drainLink} {
		if *l != nil {
			links = append(links, *l)
			*l = nil
		}
	}
	clear(p.links)
	links = append(links, p.retired.links...)
	p.retired.links = nil
	p.mu.Unlock()
	p.stopCleaner()
	closeLinks(links)
	p.closing.Wait()
}

// closeLinks closes links all at once. Closing a uprobe link waits for a
// kernel grace period (20 to 40 ms here): closed one after the other, the
// links of one process took as long as the rest of a short run.
func closeLinks(links []link.Link) {
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Go(func() { l.Close() })
	}
	wg.Wait()
}

// Close detaches the probes and frees the programs and maps.
func (p *Probes) Close() error {
	p.Detach()
	if p.tables != nil {
		p.tables.close()
	}
	err := p.objs.Close()
	if p.coll != nil {
		p.coll.Close()
	}
	return err
}

// Counters returns the BPF counters summed over all CPUs.
func (p *Probes) Counters() (Counters, error) {
	var vals [counterMax]uint64
	for i := range vals {
		var per []uint64
		if err := p.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return Counters{}, fmt.Errorf("reading counter %d: %w", i, err)
		}
		for _, v := range per {
			vals[i] += v
		}
	}
	return Counters{
		Allocs:         vals[counterAllocs],
		Frees:          vals[counterFrees],
		UnknownFrees:   vals[counterUnknownFrees],
		TableFull:      vals[counterTableFull],
		StackFull:      vals[counterStackFull],
		StackCollision: vals[counterStackCollision],
		StackError:     vals[counterStackError],
		StateError:     vals[counterStateError],
		MissedReturn:   vals[counterMissedReturn],
		Nested:         vals[counterNested],
		UsableSize:     vals[counterUsableSize],
		RecordsLost:    vals[counterRecordsLost],
		NotifyLost:     vals[counterNotifyLost],
		ErrorsLost:     vals[counterErrorsLost],
		ProgramLost:    vals[counterProgramLost],
		GenLost:        vals[counterGenLost],
		BatchLost:      vals[counterBatchLost],
		OrphansLost:    vals[counterOrphansLost],
		FreesEarly:     vals[counterFreesEarly],
	}, nil
}

// Forget drops every live allocation of process tgid, when it executes a
// new program: its old memory is gone.
func (p *Probes) Forget(tgid int) error {
	drop := func(k *bpf.MdtraceAllocKey) bool { return int(k.Tgid) == tgid }
	if err := p.dropTables(drop, map[int]bool{tgid: true}); err != nil {
		return fmt.Errorf("dropping the live table of process %d: %w", tgid, err)
	}
	return nil
}

// dropTables deletes the blocks drop picks, in one walk of the table, and
// forgets the processes in tgids, which have no blocks left.
func (p *Probes) dropTables(drop func(*bpf.MdtraceAllocKey) bool, tgids map[int]bool) error {
	p.tables.mem.RLock()
	// A tier counted empty holds none of the blocks: the processes
	// dropped make no new ones.
	for _, tr := range p.tables.nonEmpty() {
		tr.each(func(key *bpf.MdtraceAllocKey, _ *bpf.MdtraceAllocInfo, bk *bpf.MdtraceBucket, j int) {
			if drop(key) {
				tr.takeOut(bk, j, key)
			}
		})
	}
	p.tables.mem.RUnlock()
	p.dropOrphans(drop)
	p.mu.Lock()
	for tgid := range tgids {
		// A program executed in a zygote child is a program of its own.
		p.objs.Zygotes.Delete(uint32(tgid))
		delete(p.lastLen, tgid)
	}
	p.mu.Unlock()
	return nil
}

// Fork starts the table of child, a process forked from parent. A zygote
// child (forked without a vfork's promise to exec) starts with a copy of
// its parent's table, as its memory is a copy of its parent's, and what it
// allocates from now on is marked as a zygote child's (z 1 in heap dumps,
// bit 31 in leak info). Call it while the child is held before it runs.
func (p *Probes) Fork(parent, child int, zygote bool) error {
	p.reclaim(child)
	if !zygote {
		return nil
	}
	var (
		keys  []bpf.MdtraceAllocKey
		infos []bpf.MdtraceAllocInfo
	)
	// The child's own blocks, if it has run already, stay. It runs its
	// parent's program: the same gen.
	if gen, known := p.currentGen(parent); known {
		if err := p.objs.Gens.Put(uint32(child), gen); err != nil {
			return fmt.Errorf("tracing process %d, forked from %d: %w", child, parent, err)
		}
	}
	parents := p.blocksOf(parent)
	own := map[uint64]bool{}
	err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
		switch {
		case parents(key):
			k := *key
			k.Tgid = uint32(child)
			keys = append(keys, k)
			infos = append(infos, *info)
		case int(key.Tgid) == child:
			own[key.Ptr] = true
		}
	})
	if err != nil {
		return err
	}
	if len(own) > 0 {
		n := 0
		for i := range keys {
			if !own[keys[i].Ptr] {
				keys[n], infos[n] = keys[i], infos[i]
				n++
			}
		}
		keys, infos = keys[:n], infos[:n]
	}
	if len(keys) > 0 {
		if err := p.tables.putBatch(keys, infos); err != nil {
			return fmt.Errorf("copying %d blocks of process %d to its child %d: %w", len(keys), parent, child, err)
		}
	}
	// The child hands over its copies of its parent's threads' batches,
	// whose blocks' frees the probes may keep for the parent.
	if err := p.copyOrphans(parents, child); err != nil {
		return fmt.Errorf("copying the frees kept for process %d to its child %d: %w", parent, child, err)
	}
	if err := p.objs.Zygotes.Put(uint32(child), uint32(1)); err != nil {
		return fmt.Errorf("marking process %d a zygote child: %w", child, err)
	}
	return p.objs.HaveZygotes.Set(uint32(1))
}

// Stack returns the frames of a stack id (return addresses minus one), or
// nil.
func (p *Probes) Stack(id uint64) []uint64 {
	if id == 0 {
		return nil
	}
	buf := make([]byte, 8*max(p.stackDepth, 1))
	if err := p.objs.Stacks.Lookup(id, &buf); err != nil {
		return nil
	}
	return decodeStack(buf, p.stackDepth)
}

func decodeStack(buf []byte, depth int) []uint64 {
	nr := 0
	for nr < depth && nr < len(buf)/8 && le64(buf[8*nr:]) != 0 {
		nr++
	}
	frames := make([]uint64, nr)
	for j := range frames {
		frames[j] = le64(buf[8*j:]) - 1
	}
	return frames
}

// allocZygote is the bit of a live-table entry's size that says a zygote
// child made it; it mirrors ALLOC_ZYGOTE in bpf/common.h.
const allocZygote = 1 << 63

// allocOf is the live-table entry key, info as an allocation of a snapshot.
func allocOf(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) leak.Alloc {
	return leak.Alloc{
		Ptr:     key.Ptr,
		Size:    info.Size &^ allocZygote,
		Zygote:  info.Size&allocZygote != 0,
		StackID: info.StackId,
	}
}

// Snapshot reads the live allocations of process tgid, in no particular
// order, and their backtraces.
// Frames are return addresses minus one, as Android stores them.
func (p *Probes) Snapshot(tgid int) (*leak.Snapshot, error) {
	var (
		snap    *leak.Snapshot
		pending pendingCalls
	)
	// The batches and the kept frees first, then the table: a call that
	// leaves a batch meanwhile is in the table then. A batch drained
	// meanwhile (its thread ending) may be in both, partly: read again.
	for range batchReadAttempts {
		drained := p.drained()
		snap = &leak.Snapshot{PID: tgid, Stacks: map[uint64][]uint64{}, BacktraceSize: p.stackDepth}
		pending = p.pendingBatches(tgid)
		if err := p.readAllocs(tgid, snap); err != nil {
			return nil, err
		}
		if p.drained() == drained {
			break
		}
	}
	buf := make([]byte, 8*max(p.stackDepth, 1))
	for i := range snap.Allocs {
		id := snap.Allocs[i].StackID
		if id == 0 {
			continue
		}
		if _, ok := snap.Stacks[id]; ok {
			continue
		}
		if err := p.objs.Stacks.Lookup(id, &buf); err != nil {
			snap.Allocs[i].StackID = 0
			continue
		}
		snap.Stacks[id] = decodeStack(buf, p.stackDepth)
	}
	p.addPending(snap, pending)
	return snap, nil
}

// readAllocs reads the live allocations of process tgid into snap.Allocs.
// With the table's entry count known, they go straight into a slice that
// holds them all; else they are gathered in chunks and copied once into a
// slice of the right size: growing one slice by append would copy a table
// of a million allocations about five times.
func (p *Probes) readAllocs(tgid int, snap *leak.Snapshot) error {
	mine := p.blocksOf(tgid)
	if n, ok := p.tables.estimate(); ok {
		p.mu.Lock()
		if last, ok := p.lastLen[tgid]; ok {
			n = min(n, 2*last+4096)
		}
		p.mu.Unlock()
		// A little room for the entries added during the walk.
		allocs := make([]leak.Alloc, 0, n+n/64+64)
		err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
			if mine(key) {
				allocs = append(allocs, allocOf(key, info))
			}
		})
		if err != nil {
			return err
		}
		// The table may hold other processes' entries: give the room back.
		if cap(allocs) > 2*len(allocs)+1024 {
			allocs = slices.Clone(allocs)
		}
		snap.Allocs = allocs
		p.mu.Lock()
		if p.lastLen == nil {
			p.lastLen = map[int]int{}
		}
		p.lastLen[tgid] = len(allocs)
		p.mu.Unlock()
		return nil
	}
	var (
		chunks [][]leak.Alloc
		n      int
	)
	err := p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
		if !mine(key) {
			return
		}
		if len(chunks) == 0 || len(chunks[len(chunks)-1]) == cap(chunks[len(chunks)-1]) {
			chunks = append(chunks, make([]leak.Alloc, 0, min(1<<14, max(64, n))))
		}
		c := &chunks[len(chunks)-1]
		*c = append(*c, allocOf(key, info))
		n++
	})
	if err != nil {
		return err
	}
	if n > 0 {
		snap.Allocs = make([]leak.Alloc, 0, n)
		for _, c := range chunks {
			snap.Allocs = append(snap.Allocs, c...)
		}
	}
	return nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func le64(b []byte) uint64 {
	return uint64(le32(b)) | uint64(le32(b[4:]))<<32
}

// formatCount renders n with thousands separators for messages.
func formatCount(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
