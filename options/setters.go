package options

import (
	"math"
	"strconv"
)

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
