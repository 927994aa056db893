package options

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

const optionsCasesFile = "../testdata/options_cases.txt"

// optionsCase is one case of the shared option-string test file.
type optionsCase struct {
	line    int
	options string
	// want holds the expected key values of an ok: line.
	want [][2]string
	// wantErr is the expected message of an error: line.
	wantErr string
	isErr   bool
}

// unescapeOptions turns a literal backslash-t into a tab and a literal
// backslash-n into a newline; nothing else is escaped.
func unescapeOptions(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readOptionsCases parses the shared test file.
func readOptionsCases(path string) ([]optionsCase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	var cases []optionsCase
	var cur *optionsCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "options:"):
			if cur != nil {
				return nil, fmt.Errorf("line %d: options line %d has no ok: or error: line", n, cur.line)
			}
			first := strings.IndexByte(line, '"')
			last := strings.LastIndexByte(line, '"')
			if first < 0 || last == first {
				return nil, fmt.Errorf("line %d: options value is not quoted: %q", n, line)
			}
			cur = &optionsCase{line: n, options: unescapeOptions(line[first+1 : last])}
		case strings.HasPrefix(line, "ok:"):
			if cur == nil {
				return nil, fmt.Errorf("line %d: ok: line without options: line", n)
			}
			for _, kv := range strings.Fields(line[len("ok:"):]) {
				k, v, found := strings.Cut(kv, "=")
				if !found || k == "" {
					return nil, fmt.Errorf("line %d: malformed key=value %q", n, kv)
				}
				if _, known := configKeys[k]; !known {
					return nil, fmt.Errorf("line %d: unknown key %q", n, k)
				}
				cur.want = append(cur.want, [2]string{k, v})
			}
			cases = append(cases, *cur)
			cur = nil
		case strings.HasPrefix(line, "error: "):
			if cur == nil {
				return nil, fmt.Errorf("line %d: error: line without options: line", n)
			}
			cur.isErr = true
			cur.wantErr = line[len("error: "):]
			if cur.wantErr == "" {
				return nil, fmt.Errorf("line %d: empty error message", n)
			}
			cases = append(cases, *cur)
			cur = nil
		default:
			return nil, fmt.Errorf("line %d: unrecognized line %q", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("options line %d has no ok: or error: line", cur.line)
	}
	return cases, nil
}

func boolKey(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// configKeys renders each key of the shared test file from a Config.
var configKeys = map[string]func(*Config) string{
	"options":                         func(c *Config) string { return "0x" + strconv.FormatUint(c.Options, 16) },
	"front_guard_bytes":               func(c *Config) string { return strconv.FormatUint(c.FrontGuardBytes, 10) },
	"rear_guard_bytes":                func(c *Config) string { return strconv.FormatUint(c.RearGuardBytes, 10) },
	"backtrace_frames":                func(c *Config) string { return strconv.Itoa(c.BacktraceFrames) },
	"backtrace_enabled":               func(c *Config) string { return boolKey(c.BacktraceEnabled) },
	"backtrace_enable_on_signal":      func(c *Config) string { return boolKey(c.BacktraceEnableOnSignal) },
	"backtrace_dump_on_exit":          func(c *Config) string { return boolKey(c.BacktraceDumpOnExit) },
	"backtrace_dump_prefix":           func(c *Config) string { return c.BacktraceDumpPrefix },
	"backtrace_min_size_bytes":        func(c *Config) string { return strconv.FormatUint(c.BacktraceMinSizeBytes, 10) },
	"backtrace_max_size_bytes":        func(c *Config) string { return strconv.FormatUint(c.BacktraceMaxSizeBytes, 10) },
	"fill_on_alloc_bytes":             func(c *Config) string { return strconv.FormatUint(c.FillOnAllocBytes, 10) },
	"fill_on_free_bytes":              func(c *Config) string { return strconv.FormatUint(c.FillOnFreeBytes, 10) },
	"expand_alloc_bytes":              func(c *Config) string { return strconv.FormatUint(c.ExpandAllocBytes, 10) },
	"free_track_allocations":          func(c *Config) string { return strconv.FormatUint(c.FreeTrackAllocations, 10) },
	"free_track_backtrace_num_frames": func(c *Config) string { return strconv.Itoa(c.FreeTrackBacktraceNumFrames) },
	"record_allocs_num_entries":       func(c *Config) string { return strconv.FormatUint(c.RecordAllocsNumEntries, 10) },
	"record_allocs_file":              func(c *Config) string { return c.RecordAllocsFile },
	"record_allocs_on_exit":           func(c *Config) string { return boolKey(c.RecordAllocsOnExit) },
}

func TestConfigCasesFile(t *testing.T) {
	cases, err := readOptionsCases(optionsCasesFile)
	if err != nil {
		t.Fatalf("reading %s: %v", optionsCasesFile, err)
	}
	if len(cases) < 100 {
		t.Fatalf("%s has %d cases, want at least 100", optionsCasesFile, len(cases))
	}
	for _, tc := range cases {
		c, err := ParseConfig(tc.options)
		where := fmt.Sprintf("line %d: ParseConfig(%q)", tc.line, tc.options)
		if tc.isErr {
			if err == nil {
				t.Errorf("%s succeeded, want error %q", where, tc.wantErr)
				continue
			}
			if err.Error() != tc.wantErr {
				t.Errorf("%s error\n got %q\nwant %q", where, err.Error(), tc.wantErr)
			}
			if c != nil {
				t.Errorf("%s returned a Config with its error", where)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: unexpected error %q", where, err)
			continue
		}
		for _, kv := range tc.want {
			if got := configKeys[kv[0]](c); got != kv[1] {
				t.Errorf("%s: %s = %s, want %s", where, kv[0], got, kv[1])
			}
		}
	}
	t.Logf("ran %d option-string cases from %s", len(cases), optionsCasesFile)
}

func TestConfigCasesFileParser(t *testing.T) {
	if got := unescapeOptions(`a\tb\nc\\d\x`); got != "a\tb\nc\\\\d\\x" {
		t.Errorf("unescapeOptions = %q", got)
	}
	bad := []string{
		"options: \"a\"\noptions: \"b\"\nok: options=0x0\n",
		"ok: options=0x0\n",
		"options: \"a\"\n",
		"options: \"a\"\nok: nosuchkey=1\n",
		"options: \"a\"\nok: options\n",
		"options: a\nok: options=0x0\n",
		"options: \"a\"\nerror: \n",
		"something else\n",
	}
	dir := t.TempDir()
	for i, text := range bad {
		path := fmt.Sprintf("%s/bad%d.txt", dir, i)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readOptionsCases(path); err == nil {
			t.Errorf("readOptionsCases accepted malformed file %q", text)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	for _, s := range []string{"", " ", "\t\n\v\f\r "} {
		c, err := ParseConfig(s)
		if err != nil {
			t.Fatalf("ParseConfig(%q): %v", s, err)
		}
		want := &Config{
			BacktraceDumpPrefix:   DefaultBacktraceDumpPrefix,
			BacktraceMaxSizeBytes: math.MaxUint64,
		}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("ParseConfig(%q) = %+v, want %+v", s, c, want)
		}
	}
}

func TestConfigErrorType(t *testing.T) {
	c, err := ParseConfig("backtrace=XXX")
	if c != nil {
		t.Errorf("ParseConfig returned a Config with an error")
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %T is not a *ConfigError", err)
	}
	if ce.Msg != "bad value for option 'backtrace'" || ce.Error() != ce.Msg {
		t.Errorf("ConfigError = %q / %q", ce.Msg, ce.Error())
	}
}

func TestConfigNUL(t *testing.T) {
	// A NUL byte ends the option string.
	c, err := ParseConfig("backtrace=12\x00front_guard=bogus")
	if err != nil {
		t.Fatalf("unexpected error %v", err)
	}
	if c.Options != Backtrace|TrackAllocs || c.BacktraceFrames != 12 {
		t.Errorf("got options %#x frames %d", c.Options, c.BacktraceFrames)
	}
	c, err = ParseConfig("leak_track\x00")
	if err != nil || c.Options != LeakTrack|TrackAllocs {
		t.Errorf("ParseConfig(leak_track NUL) = %+v, %v", c, err)
	}
	if _, err := ParseConfig("bt=1\x002"); err != nil {
		t.Errorf("value cut at NUL: %v", err)
	}
}

func TestConfigOtherWhiteSpace(t *testing.T) {
	// Vertical tab, form feed and carriage return are white space too, but
	// other control characters and non-ASCII spaces are not.
	c, err := ParseConfig("\vbacktrace\f=\r20\rleak_track\v")
	if err != nil {
		t.Fatalf("unexpected error %v", err)
	}
	if c.BacktraceFrames != 20 || c.Options != Backtrace|TrackAllocs|LeakTrack {
		t.Errorf("got options %#x frames %d", c.Options, c.BacktraceFrames)
	}
	for s, want := range map[string]string{
		"backtrace=1\x00":      "",
		"backtrace=1\x1f":      "bad value for option 'backtrace', non space found after option: \x1f",
		"leak_track\u00a0":     "unknown option leak_track\u00a0",
		"backtrace=\u00a010":   "bad value for option 'backtrace'",
		"backtrace=１０":         "bad value for option 'backtrace'",
		"backtrace=10\u00a0":   "bad value for option 'backtrace', non space found after option: \u00a0",
		"verbose \x85 verbose": "unknown option \x85",
	} {
		_, err := ParseConfig(s)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("ParseConfig(%q) error %q, want %q", s, got, want)
		}
	}
}

func TestUsageLines(t *testing.T) {
	want := []string{
		"For malloc debug option descriptions go to:",
		"  https://android.googlesource.com/platform/bionic/+/main/libc/malloc_debug/README.md",
	}
	if !reflect.DeepEqual(UsageLines, want) {
		t.Errorf("UsageLines = %q, want %q", UsageLines, want)
	}
}

func TestConfigConstants(t *testing.T) {
	bits := []uint64{
		FrontGuard, RearGuard, Backtrace, FillOnAlloc, FillOnFree, ExpandAlloc, FreeTrack,
		TrackAllocs, LeakTrack, RecordAllocs, BacktraceFull, AbortOnError, Verbose,
		CheckUnreachableOnSignal, BacktraceSpecificSizes, LogAllocatorStatsOnSignal,
		LogAllocatorStatsOnExit,
	}
	for i, b := range bits {
		if b != 1<<i {
			t.Errorf("option bit %d = %#x, want %#x", i, b, uint64(1)<<i)
		}
	}
	if HeaderOptions != 0x3 {
		t.Errorf("HeaderOptions = %#x", HeaderOptions)
	}
	got := []int{BacktraceEnableSignal, RecordAllocsSignal, BacktraceDumpSignal, CheckUnreachableSignal, LogAllocatorStatsSignal}
	if !reflect.DeepEqual(got, []int{45, 46, 47, 48, 49}) {
		t.Errorf("signals = %v", got)
	}
	vals := []int{DefaultFillAllocValue, DefaultFillFreeValue, DefaultFrontGuardValue, DefaultRearGuardValue}
	if !reflect.DeepEqual(vals, []int{0xeb, 0xef, 0xaa, 0xbb}) {
		t.Errorf("fill and guard values = %#x", vals)
	}
	limits := []int{DefaultGuardBytes, MaxGuardBytes, DefaultBacktraceFrames, MaxBacktraceFrames,
		DefaultExpandBytes, MaxExpandBytes, DefaultFreeTrackAllocations, MaxFreeTrackAllocations,
		DefaultRecordAllocs, MaxRecordAllocs, MinimumAlignmentBytes}
	if !reflect.DeepEqual(limits, []int{32, 16384, 16, 256, 16, 16384, 100, 16384, 8000000, 50000000, 16}) {
		t.Errorf("limits = %v", limits)
	}
	if DefaultBacktraceDumpPrefix != "/tmp/backtrace_heap" || DefaultRecordAllocsFile != "/tmp/record_allocs.txt" {
		t.Errorf("default paths %q %q", DefaultBacktraceDumpPrefix, DefaultRecordAllocsFile)
	}
}

func TestConfigHas(t *testing.T) {
	c, err := ParseConfig("leak_track verbose")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bits uint64
		want bool
	}{
		{LeakTrack, true},
		{TrackAllocs, true},
		{Verbose, true},
		{Backtrace, false},
		{Backtrace | Verbose, true},
		{FrontGuard | RearGuard, false},
		{HeaderOptions, false},
		{0, false},
	} {
		if got := c.Has(tc.bits); got != tc.want {
			t.Errorf("Has(%#x) = %v, want %v", tc.bits, got, tc.want)
		}
	}
	var nilConfig *Config
	if nilConfig.Has(LeakTrack) {
		t.Errorf("nil Config has LeakTrack")
	}
	if !nilConfig.ShouldBacktraceSize(1) {
		t.Errorf("nil Config does not backtrace every size")
	}
}

func TestConfigShouldBacktraceSize(t *testing.T) {
	for _, tc := range []struct {
		options string
		sizes   map[uint64]bool
	}{
		{"backtrace", map[uint64]bool{0: true, 1: true, 1 << 40: true, math.MaxUint64: true}},
		{"", map[uint64]bool{0: true, 100: true}},
		{"backtrace backtrace_size=37", map[uint64]bool{0: false, 36: false, 37: true, 38: false}},
		{"bt bt_min_sz=9", map[uint64]bool{0: false, 8: false, 9: true, 10: true, math.MaxUint64: true}},
		{"bt bt_max_sz=13", map[uint64]bool{0: true, 1: true, 13: true, 14: false, math.MaxUint64: false}},
		{"bt bt_min_sz=10 bt_max_sz=20", map[uint64]bool{9: false, 10: true, 15: true, 20: true, 21: false}},
		// An empty range backtraces nothing.
		{"bt bt_min_sz=20 bt_max_sz=10", map[uint64]bool{9: false, 10: false, 15: false, 20: false, 21: false}},
		// The size filter applies whether or not backtraces are on.
		{"backtrace_size=5", map[uint64]bool{4: false, 5: true, 6: false}},
	} {
		c, err := ParseConfig(tc.options)
		if err != nil {
			t.Fatalf("ParseConfig(%q): %v", tc.options, err)
		}
		for size, want := range tc.sizes {
			if got := c.ShouldBacktraceSize(size); got != want {
				t.Errorf("%q: ShouldBacktraceSize(%d) = %v, want %v", tc.options, size, got, want)
			}
		}
	}
}

func TestConfigSet(t *testing.T) {
	for _, tc := range []struct {
		options string
		want    []string
	}{
		{"", nil},
		{"leak_track", []string{"leak_track"}},
		{"bt", []string{"backtrace"}},
		{"bt_dmp_on_ex bt_dmp_pre=/x bt_en_on_sig bt_full bt_max_sz=1 bt_min_sz=1 bt_sz=1",
			[]string{"backtrace_dump_on_exit", "backtrace_dump_prefix", "backtrace_enable_on_signal",
				"backtrace_full", "backtrace_max_size", "backtrace_min_size", "backtrace_size"}},
		{"verbose bt=5 leak_track backtrace verbose bt",
			[]string{"verbose", "backtrace", "leak_track"}},
		{"record_allocs_file=/x record_allocs guard",
			[]string{"record_allocs_file", "record_allocs", "guard"}},
		{"free_track", []string{"free_track"}},
	} {
		c, err := ParseConfig(tc.options)
		if err != nil {
			t.Fatalf("ParseConfig(%q): %v", tc.options, err)
		}
		if !reflect.DeepEqual(c.Set, tc.want) {
			t.Errorf("ParseConfig(%q).Set = %q, want %q", tc.options, c.Set, tc.want)
		}
	}
}

func TestConfigAliases(t *testing.T) {
	aliases := map[string]string{
		"bt":           "backtrace",
		"bt_dmp_on_ex": "backtrace_dump_on_exit",
		"bt_dmp_pre":   "backtrace_dump_prefix",
		"bt_en_on_sig": "backtrace_enable_on_signal",
		"bt_full":      "backtrace_full",
		"bt_max_sz":    "backtrace_max_size",
		"bt_min_sz":    "backtrace_min_size",
		"bt_sz":        "backtrace_size",
	}
	n := 0
	for _, o := range Options {
		if o.Alias == "" {
			continue
		}
		n++
		if aliases[o.Alias] != o.Name {
			t.Errorf("option %s has alias %s", o.Name, o.Alias)
		}
	}
	if n != len(aliases) {
		t.Errorf("%d options have aliases, want %d", n, len(aliases))
	}
	// An alias and its option parse to the same Config.
	for alias, name := range aliases {
		value := ""
		if strings.HasSuffix(name, "_size") || name == "backtrace_dump_prefix" {
			value = "=42"
		}
		a, errA := ParseConfig(alias + value)
		b, errB := ParseConfig(name + value)
		if errA != nil || errB != nil {
			t.Fatalf("%s / %s: %v / %v", alias, name, errA, errB)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s gives %+v, %s gives %+v", alias, a, name, b)
		}
	}
}

func TestOptionsTable(t *testing.T) {
	wantOrder := []string{
		"front_guard", "rear_guard", "guard", "backtrace", "backtrace_enable_on_signal",
		"backtrace_dump_on_exit", "backtrace_dump_prefix", "backtrace_min_size",
		"backtrace_max_size", "backtrace_size", "backtrace_full", "check_unreachable_on_signal",
		"fill_on_alloc", "fill_on_free", "fill", "expand_alloc", "free_track",
		"free_track_backtrace_num_frames", "leak_track", "log_allocator_stats_on_signal",
		"log_allocator_stats_on_exit", "record_allocs", "record_allocs_file",
		"record_allocs_on_exit", "verify_pointers", "abort_on_error", "verbose",
	}
	var names []string
	for _, o := range Options {
		names = append(names, o.Name)
		if o.Help == "" || strings.Contains(o.Help, "\n") {
			t.Errorf("option %s: help %q is not one line", o.Name, o.Help)
		}
		value := ""
		switch o.Value {
		case ValueNone:
			if o.Numeric {
				t.Errorf("option %s takes no value but is numeric", o.Name)
			}
			if _, err := ParseConfig(o.Name); err != nil {
				t.Errorf("option %s alone: %v", o.Name, err)
			}
			want := "value set for option '" + o.Name + "' which does not take a value"
			if _, err := ParseConfig(o.Name + "=1"); err == nil || err.Error() != want {
				t.Errorf("option %s=1: error %v, want %q", o.Name, err, want)
			}
		case ValueOptional:
			if _, err := ParseConfig(o.Name); err != nil {
				t.Errorf("option %s without value: %v", o.Name, err)
			}
			value = "=1"
		case ValueRequired:
			want := "bad value for option '" + o.Name + "'"
			if _, err := ParseConfig(o.Name); err == nil || err.Error() != want {
				t.Errorf("option %s without value: error %v, want %q", o.Name, err, want)
			}
			value = "=1"
		default:
			t.Errorf("option %s: bad value kind %d", o.Name, o.Value)
		}
		if value != "" {
			if _, err := ParseConfig(o.Name + value); err != nil {
				t.Errorf("option %s%s: %v", o.Name, value, err)
			}
		}
		if o.Value != ValueNone {
			_, err := ParseConfig(o.Name + "=x")
			if o.Numeric && err == nil {
				t.Errorf("numeric option %s accepted x", o.Name)
			}
			if !o.Numeric && err != nil {
				t.Errorf("string option %s rejected x: %v", o.Name, err)
			}
		}
		c, err := ParseConfig(o.Name + value)
		if err == nil && !reflect.DeepEqual(c.Set, []string{o.Name}) {
			t.Errorf("option %s: Set = %q", o.Name, c.Set)
		}
	}
	if !reflect.DeepEqual(names, wantOrder) {
		t.Errorf("Options order\n got %q\nwant %q", names, wantOrder)
	}
}

func TestParseLong(t *testing.T) {
	for _, tc := range []struct {
		in       string
		v        int64
		end      int
		overflow bool
	}{
		{"", 0, 0, false},
		{"0", 0, 1, false},
		{"+", 0, 0, false},
		{"-", 0, 0, false},
		{"-x", 0, 0, false},
		{"12ab", 12, 2, false},
		{"-12", -12, 3, false},
		{"+7", 7, 2, false},
		{"9223372036854775807", math.MaxInt64, 19, false},
		{"9223372036854775808", math.MaxInt64, 19, true},
		{"-9223372036854775808", math.MinInt64, 20, false},
		{"-9223372036854775809", math.MinInt64, 20, true},
		{"99999999999999999999999x", math.MaxInt64, 23, true},
		{"-99999999999999999999999", math.MinInt64, 24, true},
		{"0000000000000000000000000001", 1, 28, false},
	} {
		v, end, overflow := parseLong(tc.in)
		if v != tc.v || end != tc.end || overflow != tc.overflow {
			t.Errorf("parseLong(%q) = %d, %d, %v, want %d, %d, %v", tc.in, v, end, overflow, tc.v, tc.end, tc.overflow)
		}
	}
}

// canonicalNames is the set of canonical option names.
func canonicalNames() map[string]bool {
	m := make(map[string]bool, len(Options))
	for _, o := range Options {
		m[o.Name] = true
	}
	return m
}

func FuzzParseConfig(f *testing.F) {
	if cases, err := readOptionsCases(optionsCasesFile); err == nil {
		for _, tc := range cases {
			f.Add(tc.options)
		}
	}
	f.Add("backtrace=10\x00x")
	f.Add("bt_sz=1 bt_min_sz=2 bt_max_sz=3 bt_dmp_pre= record_allocs_file")
	canonical := canonicalNames()
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err != nil {
			if c != nil {
				t.Fatalf("ParseConfig(%q) returned a Config with error %v", s, err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Msg == "" {
				t.Fatalf("ParseConfig(%q) error %#v is not a non-empty *ConfigError", s, err)
			}
			return
		}
		seen := make(map[string]bool)
		for _, name := range c.Set {
			if !canonical[name] {
				t.Fatalf("ParseConfig(%q).Set has non-canonical name %q", s, name)
			}
			if seen[name] {
				t.Fatalf("ParseConfig(%q).Set has %q twice", s, name)
			}
			seen[name] = true
		}
		if c.Options&^(LogAllocatorStatsOnExit<<1-1) != 0 {
			t.Fatalf("ParseConfig(%q).Options = %#x has unknown bits", s, c.Options)
		}
		if c.FrontGuardBytes%MinimumAlignmentBytes != 0 || c.FrontGuardBytes > MaxGuardBytes {
			t.Fatalf("ParseConfig(%q).FrontGuardBytes = %d", s, c.FrontGuardBytes)
		}
		if c.BacktraceFrames < 0 || c.BacktraceFrames > MaxBacktraceFrames {
			t.Fatalf("ParseConfig(%q).BacktraceFrames = %d", s, c.BacktraceFrames)
		}
		// Parsing is deterministic.
		c2, err2 := ParseConfig(s)
		if err2 != nil || !reflect.DeepEqual(c, c2) {
			t.Fatalf("ParseConfig(%q) differs between calls", s)
		}
	})
}
