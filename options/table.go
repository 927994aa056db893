package options

// ValueKind tells whether an option takes a value.
type ValueKind int

// OptionInfo describes one option for the command line.
type OptionInfo struct {
	// Name is the canonical option name, Alias the short alias or "".
	Name, Alias string
	// Value tells whether the option takes a value.
	Value ValueKind
	// Numeric is true when the value is a number, false when it is a string.
	Numeric bool
	// Help is a one-line description.
	Help string
}

// optionSpec is one entry of the option table: its description, the bits
// it sets on success and the function that applies its value.
type optionSpec struct {
	info OptionInfo
	bits uint64
	// set applies the value; name is the name as written (possibly the
	// alias), which is the one error messages show.
	set func(c *Config, name, value string) error
}

// optionSpecs is the option table in the order of Android's malloc debug
// documentation. log_allocator_stats_on_exit, which the documentation does
// not describe, follows log_allocator_stats_on_signal.
var optionSpecs = []optionSpec{
	{
		info: OptionInfo{Name: "front_guard", Value: ValueOptional, Numeric: true,
			Help: "Guard bytes before each allocation, filled with 0xaa (default 32, max 16384, rounded up to 16)."},
		bits: FrontGuard | TrackAllocs,
		set:  setFrontGuard,
	},
	{
		info: OptionInfo{Name: "rear_guard", Value: ValueOptional, Numeric: true,
			Help: "Guard bytes after each allocation, filled with 0xbb (default 32, max 16384)."},
		bits: RearGuard | TrackAllocs,
		set:  setRearGuard,
	},
	{
		info: OptionInfo{Name: "guard", Value: ValueOptional, Numeric: true,
			Help: "Both front and rear guards of this many bytes (default 32, max 16384)."},
		bits: FrontGuard | RearGuard | TrackAllocs,
		set:  setGuard,
	},
	{
		info: OptionInfo{Name: "backtrace", Alias: "bt", Value: ValueOptional, Numeric: true,
			Help: "Record the backtrace of every allocation, up to this many frames (default 16, max 256)."},
		bits: Backtrace | TrackAllocs,
		set:  setBacktrace,
	},
	{
		info: OptionInfo{Name: "backtrace_enable_on_signal", Alias: "bt_en_on_sig", Value: ValueOptional, Numeric: true,
			Help: "Toggle backtrace recording on signal 45, up to this many frames (default 16, max 256)."},
		bits: Backtrace | TrackAllocs,
		set:  setBacktraceEnableOnSignal,
	},
	{
		info: OptionInfo{Name: "backtrace_dump_on_exit", Alias: "bt_dmp_on_ex", Value: ValueNone,
			Help: "Dump the backtrace heap data to PREFIX.PID.exit.txt when the program exits."},
		set: setBacktraceDumpOnExit,
	},
	{
		info: OptionInfo{Name: "backtrace_dump_prefix", Alias: "bt_dmp_pre", Value: ValueOptional,
			Help: "Prefix of backtrace heap dump files (default " + DefaultBacktraceDumpPrefix + ")."},
		set: setBacktraceDumpPrefix,
	},
	{
		info: OptionInfo{Name: "backtrace_min_size", Alias: "bt_min_sz", Value: ValueRequired, Numeric: true,
			Help: "Only backtrace allocations of at least this many bytes."},
		bits: BacktraceSpecificSizes,
		set:  setBacktraceMinSize,
	},
	{
		info: OptionInfo{Name: "backtrace_max_size", Alias: "bt_max_sz", Value: ValueRequired, Numeric: true,
			Help: "Only backtrace allocations of at most this many bytes."},
		bits: BacktraceSpecificSizes,
		set:  setBacktraceMaxSize,
	},
	{
		info: OptionInfo{Name: "backtrace_size", Alias: "bt_sz", Value: ValueRequired, Numeric: true,
			Help: "Only backtrace allocations of exactly this many bytes."},
		bits: BacktraceSpecificSizes,
		set:  setBacktraceSize,
	},
	{
		info: OptionInfo{Name: "backtrace_full", Alias: "bt_full", Value: ValueNone,
			Help: "Use the slower, more thorough unwinder for every backtrace."},
		bits: BacktraceFull,
		set:  verifyValueEmpty,
	},
	{
		info: OptionInfo{Name: "check_unreachable_on_signal", Value: ValueNone,
			Help: "Check for unreachable memory when signal 48 is received."},
		bits: CheckUnreachableOnSignal,
		set:  verifyValueEmpty,
	},
	{
		info: OptionInfo{Name: "fill_on_alloc", Value: ValueOptional, Numeric: true,
			Help: "Fill new allocations with 0xeb, up to this many bytes (default: all)."},
		bits: FillOnAlloc,
		set:  setFillOnAlloc,
	},
	{
		info: OptionInfo{Name: "fill_on_free", Value: ValueOptional, Numeric: true,
			Help: "Fill freed allocations with 0xef, up to this many bytes (default: all)."},
		bits: FillOnFree,
		set:  setFillOnFree,
	},
	{
		info: OptionInfo{Name: "fill", Value: ValueOptional, Numeric: true,
			Help: "Both fill_on_alloc and fill_on_free, up to this many bytes (default: all)."},
		bits: FillOnAlloc | FillOnFree,
		set:  setFill,
	},
	{
		info: OptionInfo{Name: "expand_alloc", Value: ValueOptional, Numeric: true,
			Help: "Add this many bytes to every allocation (default 16, max 16384)."},
		bits: ExpandAlloc,
		set:  setExpandAlloc,
	},
	{
		info: OptionInfo{Name: "free_track", Value: ValueOptional, Numeric: true,
			Help: "Keep this many freed allocations and check them for use after free (default 100, max 16384)."},
		bits: FreeTrack | FillOnFree | TrackAllocs,
		set:  setFreeTrack,
	},
	{
		info: OptionInfo{Name: "free_track_backtrace_num_frames", Value: ValueOptional, Numeric: true,
			Help: "Frames of the backtrace recorded at free for free_track (default 16, max 256, 0 disables)."},
		set: setFreeTrackBacktraceNumFrames,
	},
	{
		info: OptionInfo{Name: "leak_track", Value: ValueNone,
			Help: "Log every allocation still live when the program exits."},
		bits: LeakTrack | TrackAllocs,
		set:  verifyValueEmpty,
	},
	{
		info: OptionInfo{Name: "log_allocator_stats_on_signal", Value: ValueNone,
			Help: "Log allocator statistics when signal 49 is received."},
		bits: LogAllocatorStatsOnSignal,
		set:  verifyValueEmpty,
	},
	{
		info: OptionInfo{Name: "log_allocator_stats_on_exit", Value: ValueNone,
			Help: "Log allocator statistics when the program exits."},
		bits: LogAllocatorStatsOnExit,
		set:  verifyValueEmpty,
	},
	{
		info: OptionInfo{Name: "record_allocs", Value: ValueOptional, Numeric: true,
			Help: "Record every allocation and free, up to this many entries, written on signal 46 (default 8000000, max 50000000)."},
		bits: RecordAllocs,
		set:  setRecordAllocs,
	},
	{
		info: OptionInfo{Name: "record_allocs_file", Value: ValueOptional,
			Help: "File the allocation records are written to (default " + DefaultRecordAllocsFile + ")."},
		set: setRecordAllocsFile,
	},
	{
		info: OptionInfo{Name: "record_allocs_on_exit", Value: ValueNone,
			Help: "Also write the allocation records to FILE.PID when the program exits."},
		set: setRecordAllocsOnExit,
	},
	{
		info: OptionInfo{Name: "verify_pointers", Value: ValueNone,
			Help: "Report free, realloc and malloc_usable_size calls on unknown pointers."},
		bits: TrackAllocs,
		set:  verifyValueEmpty,
	},
	{
		info: OptionInfo{Name: "abort_on_error", Value: ValueNone,
			Help: "Abort the program after reporting an error."},
		bits: AbortOnError,
		set:  verifyValueEmpty,
	},
	{
		info: OptionInfo{Name: "verbose", Value: ValueNone,
			Help: "Log informational messages, such as the signals to send."},
		bits: Verbose,
		set:  verifyValueEmpty,
	},
}

// Options lists every option in the order of Android's malloc debug
// documentation.
var Options = optionInfos()

// optionIndex maps every name and alias to its entry of optionSpecs.
var optionIndex = buildOptionIndex()

func optionInfos() []OptionInfo {
	infos := make([]OptionInfo, len(optionSpecs))
	for i := range optionSpecs {
		infos[i] = optionSpecs[i].info
	}
	return infos
}

func buildOptionIndex() map[string]*optionSpec {
	index := make(map[string]*optionSpec, 2*len(optionSpecs))
	for i := range optionSpecs {
		spec := &optionSpecs[i]
		index[spec.info.Name] = spec
		if spec.info.Alias != "" {
			index[spec.info.Alias] = spec
		}
	}
	return index
}
