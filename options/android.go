package options

import (
	"math"
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

const (
	// ValueNone options are flags; giving them a value is an error.
	ValueNone ValueKind = iota
	// ValueOptional options use a default when they have no value.
	ValueOptional
	// ValueRequired options fail when they have no value.
	ValueRequired
)

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
