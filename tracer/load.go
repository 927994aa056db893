//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/mdtrace/mdtrace/bpf"
)

// LoadProbes loads the BPF programs and maps into the kernel.
func LoadProbes(cfg ProbeConfig) (*Probes, error) {
	if cfg.StackDepth < 0 || cfg.StackDepth > MaxStackDepth {
		return nil, fmt.Errorf("backtrace depth %d out of range 0..%d", cfg.StackDepth, MaxStackDepth)
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
	// The kernel's BTF, for the CO-RE relocations, is read from here,
	// while the programs' ELF is read (8 ms) and their maps made.
	btfCache, btfRead := readKernelBTF()
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
		"sample_bytes":     cfg.SampleBytes,
	}
	if cfg.SampleBytes > MaxSampleBytes {
		return nil, fmt.Errorf("sampling interval %d over the most, %d", cfg.SampleBytes, uint64(MaxSampleBytes))
	}
	if cfg.SampleBytes > 0 {
		vars["neg_ln"] = negLnTable()
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
	if cfg.All {
		vars["gens_all"] = uint32(1)
		vars["count_calls"] = boolU32(cfg.CountCalls)
		if cfg.CountCalls {
			vars["busy_calls"] = cfg.BusyCalls
			vars["soon_calls"] = soonCalls(cfg.BusyCalls)
			vars["eager_head"] = cfg.EagerHead
		}
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
	if !cfg.All {
		// The programs of processes are kept only for --all.
		spec.Maps["exec_names"].MaxEntries = 1
	}
	if cfg.CountedProcesses != 0 {
		spec.Maps["proc_calls"].MaxEntries = cfg.CountedProcesses
	}
	if cfg.StackDepth == 0 {
		// No walks, none to finish: the smallest ring buffer.
		spec.Maps["deferred"].MaxEntries = uint32(os.Getpagesize())
	}
	if err := spec.Variables["record_wakeup_bytes"].Set(uint64(cfg.RecordBufferBytes / 4)); err != nil {
		return nil, fmt.Errorf("setting record_wakeup_bytes: %w", err)
	}
	first := cfg.FirstTable
	if first == 0 {
		first = firstTier
	}
	tiers := tierSizes(cfg.MaxAllocs, first)
	spec.Maps["allocs"].MaxEntries = tierBuckets(tiers[0])
	nb, at, mult := tierVars(spec.Maps["allocs"].MaxEntries)
	if err := spec.Variables["tier_buckets"].Set(nb); err != nil {
		return nil, fmt.Errorf("setting tier_buckets: %w", err)
	}
	if err := spec.Variables["tier_filling_at"].Set(at); err != nil {
		return nil, fmt.Errorf("setting tier_filling_at: %w", err)
	}
	if err := spec.Variables["tier_occ_mult"].Set(mult); err != nil {
		return nil, fmt.Errorf("setting tier_occ_mult: %w", err)
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
	if cfg.UnwindEntries == 0 {
		cfg.UnwindEntries = DefaultUnwindEntries
	}
	unwindInner := spec.Maps["unwind_tables"].InnerMap.Copy()

	p := &Probes{
		stackDepth: cfg.StackDepth, sampleBytes: cfg.SampleBytes, record: cfg.Record, verify: cfg.Verify,
		btMin: cfg.BacktraceMinSize, btMax: cfg.BacktraceMaxSize, allocBacktraces: !cfg.NoAllocBacktraces,
		noBatch: cfg.NoBatch || cfg.Record,
		links:   map[int][]link.Link{}, attached: map[int][]string{}, points: map[int][]ProbePoint{},
		probed: map[int]map[fileID]bool{}, fileLinks: map[int]map[fileID][]link.Link{}, probeOffsets: map[fileID][]uint64{}, watched: map[int]map[string]bool{},
		retireEvery: retireDelay,
	}
	if !cfg.PerProbeLinks && features.HaveBPFLinkUprobeMulti() == nil {
		p.multi = true
		spec.Programs["alloc_entry"].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs["alloc_return"].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs["alloc_site"].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs["libraries_changed"].AttachType = ebpf.AttachTraceUprobeMulti
	}
	// Uprobe sessions need uprobe_multi links (p.load asks the kernel's
	// BTF whether it has them).
	if !p.multi {
		delete(spec.Programs, "alloc_session")
	}
	err = p.load(spec, cfg.Program != "" || cfg.All, btfCache, btfRead)
	if err != nil && vars["preemptible"] == uint32(1) && strings.Contains(err.Error(), "use static function instead") {
		// Kernels before 6.13 with the kfuncs (6.10) refuse a global
		// function called with preemption off: the walks go without
		// the guard, and two taken on one CPU at once may mix (rare).
		if serr := spec.Variables["preemptible"].Set(uint32(0)); serr != nil {
			return nil, serr
		}
		p.Unguarded = true
		err = p.load(spec, cfg.Program != "" || cfg.All, btfCache, btfRead)
	}
	if err != nil {
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
	if cfg.StackDepth > 0 {
		p.unwind = &unwindTables{tables: p.objs.UnwindTables, inner: unwindInner, procs: p.objs.UnwindProcs, named: p.objs.UnwindFiles, notices: p.objs.UnwindNotices,
			exes: p.objs.UnwindExes, room: cfg.UnwindEntries, files: map[fileID]*unwindFile{},
			placed: map[string]bpf.MdtraceUnwindFile{}}
		p.unwind.fillPool()
	}
	p.tables, err = newLiveTables(tableObjects{
		outer: p.objs.Tables, first: p.objs.Allocs, moves: p.objs.TierMoves, blocks: p.objs.TierBlocks, occ: p.objs.TableOcc,
		top: p.objs.TopTable, filling: p.objs.TierFilling, buckets: p.objs.TierBuckets, at: p.objs.TierFillingAt,
		mult: p.objs.TierOccMult,
	}, tierSpec, tiers)
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// programMode are the programs only program mode (and --all, for
// program_fork) loads: the verifier takes tens of milliseconds over them,
// which other modes need not wait for.
var programMode = []string{"program_exec", "program_fork"}

// siteGroup are the programs verified on their own, beside the others: the
// verifier takes about as long over alloc_site as over all the rest.
var siteGroup = []string{"alloc_site"}

// mappingsGroup are the programs that follow the allocator's mappings
// (mappings.go), loaded on their own: mdtrace goes on without them.
var mappingsGroup = []string{"mappings_exit"}

// sessionGroup is the program of uprobe sessions (session.go), loaded on
// its own: without it the entry and return probes are made apart.
var sessionGroup = []string{"alloc_session"}

// haveUprobeSessions reports whether the kernel's BTF, in cache, knows the
// attach type of uprobe sessions (6.13).
func haveUprobeSessions(cache *btf.Cache) bool {
	k, err := cache.Kernel()
	if err != nil {
		return false
	}
	var e *btf.Enum
	if k.TypeByName("bpf_attach_type", &e) != nil {
		return false
	}
	return slices.ContainsFunc(e.Values, func(v btf.EnumValue) bool { return v.Name == "BPF_TRACE_UPROBE_SESSION" })
}

// load loads the BPF objects into p.objs: every map and variable, and the
// programs, with program mode's only when programs is set (else they stay
// nil).
//
// It overlaps what it can, as mdtrace's start is the traced command's
// wait: the kernel creates the maps (the live table's buckets alone take
// 40 ms for the default 4M entries) while mdtrace reads the kernel's BTF
// for the CO-RE relocations into cache (15 to 30 ms, done when warmed is
// closed: readKernelBTF), and the programs are verified in two groups at
// once, on two CPUs where there are.
//
// On an error nothing stays loaded.
func (p *Probes) load(spec *ebpf.CollectionSpec, programs bool, cache *btf.Cache, warmed <-chan struct{}) (err error) {
	mapsOnly := spec.Copy()
	mapsOnly.Programs = map[string]*ebpf.ProgramSpec{}
	coll, err := ebpf.NewCollection(mapsOnly)
	<-warmed
	if err != nil {
		return err
	}
	// The session program only where the kernel has uprobe sessions
	// (6.13): before, its verification at every start would be for
	// nothing. The kernel's BTF is read already, for the relocations.
	sessions := haveUprobeSessions(cache)
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
	var progs [4]map[string]*ebpf.Program
	var errs [5]error
	var wg sync.WaitGroup
	// An update of a map of maps waits for an RCU grace period, 10 to 20
	// ms here: the first tier goes into the tables map while the verifier
	// works.
	wg.Go(func() {
		if err := p.objs.Tables.Put(uint32(0), p.objs.Allocs); err != nil {
			errs[4] = fmt.Errorf("putting the live table's first tier in place: %w", err)
		}
	})
	for i, want := range []func(string) bool{
		func(name string) bool { return slices.Contains(siteGroup, name) },
		func(name string) bool {
			return !slices.Contains(siteGroup, name) && !slices.Contains(mappingsGroup, name) &&
				!slices.Contains(sessionGroup, name) && (programs || !slices.Contains(programMode, name))
		},
		func(name string) bool { return slices.Contains(mappingsGroup, name) },
		func(name string) bool { return sessions && slices.Contains(sessionGroup, name) },
	} {
		group := spec.Copy()
		maps.DeleteFunc(group.Programs, func(name string, _ *ebpf.ProgramSpec) bool { return !want(name) })
		if len(group.Programs) == 0 {
			continue
		}
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
	// Without the mappings' programs the reachability check reads the
	// allocator's own memory as roots, and says so.
	if errs[2] != nil {
		p.mappingsErr = fmt.Errorf("loading the program that follows mmap: %w", errs[2])
		errs[2] = nil
	}
	// Without the session program, entry and return probes apart.
	errs[3] = nil
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

// readKernelBTF starts reading the kernel's BTF into a cache, and returns
// it with a channel closed once it is read.
func readKernelBTF() (*btf.Cache, <-chan struct{}) {
	cache := btf.NewCache()
	warmed := make(chan struct{})
	go func() {
		defer close(warmed)
		if k, err := cache.Kernel(); err == nil {
			var task *btf.Struct
			k.TypeByName("task_struct", &task)
		}
	}()
	return cache, warmed
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
