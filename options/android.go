package options

import (
	"math"
	"strconv"
	"strings"
)

// Option bits, with the same values as Android's malloc debug uses.
const (
	FrontGuard                uint64 = 0x1
	RearGuard                 uint64 = 0x2
	Backtrace                 uint64 = 0x4
	FillOnAlloc               uint64 = 0x8
	FillOnFree                uint64 = 0x10
	ExpandAlloc               uint64 = 0x20
	FreeTrack                 uint64 = 0x40
	TrackAllocs               uint64 = 0x80
	LeakTrack                 uint64 = 0x100
	RecordAllocs              uint64 = 0x200
	BacktraceFull             uint64 = 0x400
	AbortOnError              uint64 = 0x800
	Verbose                   uint64 = 0x1000
	CheckUnreachableOnSignal  uint64 = 0x2000
	BacktraceSpecificSizes    uint64 = 0x4000
	LogAllocatorStatsOnSignal uint64 = 0x8000
	LogAllocatorStatsOnExit   uint64 = 0x10000

	// HeaderOptions are the options that put a header in front of every
	// allocation.
	HeaderOptions = FrontGuard | RearGuard
)

// Defaults and limits of the options.
const (
	// MinimumAlignmentBytes is the alignment of every allocation on a 64-bit
	// system; front guards are rounded up to a multiple of it.
	MinimumAlignmentBytes = 16

	DefaultFillAllocValue  = 0xeb
	DefaultFillFreeValue   = 0xef
	DefaultFrontGuardValue = 0xaa
	DefaultRearGuardValue  = 0xbb

	DefaultGuardBytes = 32
	MaxGuardBytes     = 16384

	DefaultBacktraceFrames = 16
	MaxBacktraceFrames     = 256

	DefaultExpandBytes = 16
	MaxExpandBytes     = 16384

	DefaultFreeTrackAllocations = 100
	MaxFreeTrackAllocations     = 16384

	DefaultRecordAllocs = 8000000
	MaxRecordAllocs     = 50000000

	// DefaultFillBytes is the number of bytes filled when fill, fill_on_alloc
	// or fill_on_free has no value: the whole allocation.
	DefaultFillBytes uint64 = math.MaxUint64

	// DefaultBacktraceDumpPrefix is the prefix of heap dump files. Android
	// uses /data/local/tmp; on Linux the files go to /tmp.
	DefaultBacktraceDumpPrefix = "/tmp/backtrace_heap"
	// DefaultRecordAllocsFile is the file record_allocs writes to. Android
	// uses /data/local/tmp; on Linux the file goes to /tmp.
	DefaultRecordAllocsFile = "/tmp/record_allocs.txt"
)

// Signals used by the options. They are SIGRTMAX-19 to SIGRTMAX-15, which
// are the same numbers on Linux as on Android.
const (
	BacktraceEnableSignal   = 45
	RecordAllocsSignal      = 46
	BacktraceDumpSignal     = 47
	CheckUnreachableSignal  = 48
	LogAllocatorStatsSignal = 49
)

// UsageLines are the two lines logged after every option error.
var UsageLines = []string{
	"For malloc debug option descriptions go to:",
	"  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md",
}

// Config is a parsed malloc debug option string.
type Config struct {
	// Options is the set of option bits.
	Options uint64

	FrontGuardBytes, RearGuardBytes uint64

	BacktraceFrames                                                int
	BacktraceEnabled, BacktraceEnableOnSignal, BacktraceDumpOnExit bool
	BacktraceDumpPrefix                                            string
	// BacktraceMinSizeBytes and BacktraceMaxSizeBytes bound, inclusively, the
	// sizes of the allocations that get a backtrace when
	// BacktraceSpecificSizes is set. They are 0 and math.MaxUint64 by default.
	BacktraceMinSizeBytes, BacktraceMaxSizeBytes uint64

	FillOnAllocBytes, FillOnFreeBytes uint64

	ExpandAllocBytes uint64

	FreeTrackAllocations        uint64
	FreeTrackBacktraceNumFrames int

	RecordAllocsNumEntries uint64
	RecordAllocsFile       string
	RecordAllocsOnExit     bool

	// Set lists the canonical names (never aliases) of the options the
	// string named, in the order they first appeared, once each.
	Set []string
}

// Has reports whether any of the bits are set.
func (c *Config) Has(bits uint64) bool {
	return c != nil && c.Options&bits != 0
}

// ShouldBacktraceSize reports whether an allocation of this size gets a
// backtrace. Without BacktraceSpecificSizes every size does; with it, only
// sizes between BacktraceMinSizeBytes and BacktraceMaxSizeBytes inclusive.
// It does not look at whether backtraces are enabled at all.
func (c *Config) ShouldBacktraceSize(size uint64) bool {
	if !c.Has(BacktraceSpecificSizes) {
		return true
	}
	return size >= c.BacktraceMinSizeBytes && size <= c.BacktraceMaxSizeBytes
}

// ConfigError is the error ParseConfig returns. Msg is the message malloc
// debug logs, without the program name prefix; UsageLines follow it in the
// log.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

// ValueKind tells whether an option takes a value.
type ValueKind int

const (
	// ValueNone options are flags; giving them a value is an error.
	ValueNone ValueKind = iota
	// ValueOptional options use a default when they have no value.
	ValueOptional
	// ValueRequired options fail when they have no value.
	ValueRequired
)

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

// isSpace reports whether b is a white-space character in the C locale.
func isSpace(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

// nextOption reads one option from s starting at pos. It returns the name,
// the value ("" when there is none), the position after the option, and
// false when only white space is left.
func nextOption(s string, pos int) (name, value string, next int, ok bool) {
	i := pos
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i == len(s) {
		return "", "", i, false
	}
	start := i
	for i < len(s) && !isSpace(s[i]) && s[i] != '=' {
		i++
	}
	name = s[start:i]
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i < len(s) && s[i] == '=' {
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		start = i
		for i < len(s) && !isSpace(s[i]) {
			i++
		}
		value = s[start:i]
	}
	return name, value, i, true
}

// ParseConfig parses an option string with the semantics of Android's
// malloc debug: options are separated by white space, each is a name,
// optionally followed by '=' and a value, with white space allowed around
// the '='. The first error stops parsing; the returned error is then a
// *ConfigError and the Config is nil. A NUL byte ends the string, as it
// does for the C string the options come from.
func ParseConfig(s string) (*Config, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	c := &Config{
		BacktraceDumpPrefix:   DefaultBacktraceDumpPrefix,
		BacktraceMaxSizeBytes: math.MaxUint64,
	}
	pos := 0
	for {
		name, value, next, ok := nextOption(s, pos)
		if !ok {
			break
		}
		pos = next
		spec := optionIndex[name]
		if spec == nil {
			return nil, &ConfigError{Msg: "unknown option " + name}
		}
		if err := spec.set(c, name, value); err != nil {
			return nil, err
		}
		c.Options |= spec.bits
		c.markSet(spec.info.Name)
	}
	return c, nil
}

// markSet appends name to Set unless it is already there.
func (c *Config) markSet(name string) {
	for _, n := range c.Set {
		if n == name {
			return
		}
	}
	c.Set = append(c.Set, name)
}

// parseLong converts s like C's strtol with base 10 (s never starts with
// white space here). It returns the value, the number of bytes consumed
// (0 when there are no digits) and whether the value overflowed a signed
// 64-bit long, in which case the value is clamped.
func parseLong(s string) (v int64, end int, overflow bool) {
	i := 0
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	digits := i
	// The magnitude is accumulated in a uint64; the limit is 2^63 for a
	// negative number and 2^63-1 for a positive one.
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	var mag uint64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		d := uint64(s[i] - '0')
		if !overflow {
			if mag > (limit-d)/10 {
				overflow = true
			} else {
				mag = mag*10 + d
			}
		}
		i++
	}
	if i == digits {
		return 0, 0, false
	}
	if overflow {
		if neg {
			return math.MinInt64, i, true
		}
		return math.MaxInt64, i, true
	}
	if neg {
		// mag is at most 2^63, whose negation wraps to MinInt64 as wanted.
		return -int64(mag), i, false
	}
	return int64(mag), i, false
}

// badValue returns the error for a bad value of the named option; detail,
// when not empty, is appended after the option name as is.
func badValue(name, detail string) error {
	return &ConfigError{Msg: "bad value for option '" + name + "'" + detail}
}

// parseValue parses a required numeric value within [min, max]. The checks
// are made in malloc debug's order: overflow, no digits, trailing
// characters, negative value, minimum, maximum.
func parseValue(name, value string, min, max uint64) (uint64, error) {
	v, end, overflow := parseLong(value)
	switch {
	case overflow:
		return 0, badValue(name, ": Numerical result out of range")
	case end == 0:
		return 0, badValue(name, "")
	case end != len(value):
		return 0, badValue(name, ", non space found after option: "+value[end:])
	case v < 0:
		return 0, badValue(name, ", value cannot be negative: "+strconv.FormatInt(v, 10))
	case uint64(v) < min:
		return 0, badValue(name, ", value must be >= "+strconv.FormatUint(min, 10)+": "+strconv.FormatInt(v, 10))
	case uint64(v) > max:
		return 0, badValue(name, ", value must be <= "+strconv.FormatUint(max, 10)+": "+strconv.FormatInt(v, 10))
	}
	return uint64(v), nil
}

// parseOptional parses an optional numeric value: an empty value yields
// def, anything else must lie within [min, max].
func parseOptional(name, value string, def, min, max uint64) (uint64, error) {
	if value == "" {
		return def, nil
	}
	return parseValue(name, value, min, max)
}

// alignUp rounds n up to a multiple of MinimumAlignmentBytes.
func alignUp(n uint64) uint64 {
	return (n + MinimumAlignmentBytes - 1) &^ (MinimumAlignmentBytes - 1)
}

func verifyValueEmpty(_ *Config, name, value string) error {
	if value != "" {
		return &ConfigError{Msg: "value set for option '" + name + "' which does not take a value"}
	}
	return nil
}

func setGuard(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultGuardBytes, 1, MaxGuardBytes)
	if err != nil {
		return err
	}
	c.RearGuardBytes = n
	c.FrontGuardBytes = alignUp(n)
	return nil
}

func setFrontGuard(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultGuardBytes, 1, MaxGuardBytes)
	if err != nil {
		return err
	}
	c.FrontGuardBytes = alignUp(n)
	return nil
}

func setRearGuard(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultGuardBytes, 1, MaxGuardBytes)
	if err != nil {
		return err
	}
	c.RearGuardBytes = n
	return nil
}

func setBacktrace(c *Config, name, value string) error {
	c.BacktraceEnabled = true
	n, err := parseOptional(name, value, DefaultBacktraceFrames, 1, MaxBacktraceFrames)
	if err != nil {
		return err
	}
	c.BacktraceFrames = int(n)
	return nil
}

func setBacktraceEnableOnSignal(c *Config, name, value string) error {
	c.BacktraceEnableOnSignal = true
	n, err := parseOptional(name, value, DefaultBacktraceFrames, 1, MaxBacktraceFrames)
	if err != nil {
		return err
	}
	c.BacktraceFrames = int(n)
	return nil
}

func setBacktraceDumpOnExit(c *Config, name, value string) error {
	if err := verifyValueEmpty(c, name, value); err != nil {
		return err
	}
	c.BacktraceDumpOnExit = true
	return nil
}

func setBacktraceDumpPrefix(c *Config, _, value string) error {
	if value == "" {
		value = DefaultBacktraceDumpPrefix
	}
	c.BacktraceDumpPrefix = value
	return nil
}

func setBacktraceMinSize(c *Config, name, value string) error {
	n, err := parseValue(name, value, 1, math.MaxUint64)
	if err != nil {
		return err
	}
	c.BacktraceMinSizeBytes = n
	return nil
}

func setBacktraceMaxSize(c *Config, name, value string) error {
	n, err := parseValue(name, value, 1, math.MaxUint64)
	if err != nil {
		return err
	}
	c.BacktraceMaxSizeBytes = n
	return nil
}

func setBacktraceSize(c *Config, name, value string) error {
	n, err := parseValue(name, value, 1, math.MaxUint64)
	if err != nil {
		return err
	}
	c.BacktraceMinSizeBytes = n
	c.BacktraceMaxSizeBytes = n
	return nil
}

func setFill(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultFillBytes, 1, math.MaxUint64)
	if err != nil {
		return err
	}
	c.FillOnAllocBytes = n
	c.FillOnFreeBytes = n
	return nil
}

func setFillOnAlloc(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultFillBytes, 1, math.MaxUint64)
	if err != nil {
		return err
	}
	c.FillOnAllocBytes = n
	return nil
}

func setFillOnFree(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultFillBytes, 1, math.MaxUint64)
	if err != nil {
		return err
	}
	c.FillOnFreeBytes = n
	return nil
}

func setExpandAlloc(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultExpandBytes, 1, MaxExpandBytes)
	if err != nil {
		return err
	}
	c.ExpandAllocBytes = n
	return nil
}

// setFreeTrack also turns on filling freed memory and free backtraces, but
// only where an earlier option has not already set them.
func setFreeTrack(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultFreeTrackAllocations, 1, MaxFreeTrackAllocations)
	if err != nil {
		return err
	}
	c.FreeTrackAllocations = n
	if c.FillOnFreeBytes == 0 {
		c.FillOnFreeBytes = DefaultFillBytes
	}
	if c.FreeTrackBacktraceNumFrames == 0 {
		c.FreeTrackBacktraceNumFrames = DefaultBacktraceFrames
	}
	return nil
}

func setFreeTrackBacktraceNumFrames(c *Config, name, value string) error {
	n, err := parseOptional(name, value, DefaultBacktraceFrames, 0, MaxBacktraceFrames)
	if err != nil {
		return err
	}
	c.FreeTrackBacktraceNumFrames = int(n)
	return nil
}

// setRecordAllocs also chooses the default record file unless an earlier
// option named one.
func setRecordAllocs(c *Config, name, value string) error {
	if c.RecordAllocsFile == "" {
		c.RecordAllocsFile = DefaultRecordAllocsFile
	}
	n, err := parseOptional(name, value, DefaultRecordAllocs, 1, MaxRecordAllocs)
	if err != nil {
		return err
	}
	c.RecordAllocsNumEntries = n
	return nil
}

func setRecordAllocsFile(c *Config, _, value string) error {
	if value == "" {
		value = DefaultRecordAllocsFile
	}
	c.RecordAllocsFile = value
	return nil
}

func setRecordAllocsOnExit(c *Config, name, value string) error {
	if err := verifyValueEmpty(c, name, value); err != nil {
		return err
	}
	c.RecordAllocsOnExit = true
	return nil
}
