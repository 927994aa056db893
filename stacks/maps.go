package stacks

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// deletedSuffix is what the kernel appends to the path of a mapped file
// that has been unlinked or replaced since it was mapped.
const deletedSuffix = " (deleted)"

// Maps is a snapshot of /proc/PID/maps.
//
// A Maps is not modified by this package once parsed, so it is safe for
// concurrent use as long as callers do not modify it either.
type Maps struct {
	Mappings []Mapping // in file order (ascending addresses)
	Raw      []byte    // the verbatim text, for heap dumps
}

// ParseMaps parses the text of a /proc/PID/maps file.
//
// Each non-blank line must hold an address range, permissions, an offset, a
// device and an inode, optionally followed by a path. The path is everything
// after the blanks that follow the inode, kept verbatim: it may contain
// spaces and end in " (deleted)". Blank lines are skipped. Mappings must
// ascend and must not overlap, as the kernel prints them, so that Find can
// search them. A malformed line is reported with its 1-based line number.
// Raw holds a copy of data.
func ParseMaps(data []byte) (*Maps, error) {
	m := &Maps{Raw: bytes.Clone(data)}
	if m.Raw == nil {
		m.Raw = []byte{}
	}
	rest := data
	for n := 1; len(rest) > 0; n++ {
		var line []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			line, rest = rest, nil
		}
		if len(bytes.TrimLeft(line, " \t")) == 0 {
			continue
		}
		mp, err := parseMapsLine(string(line))
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, err)
		}
		if k := len(m.Mappings); k > 0 && mp.Start < m.Mappings[k-1].End {
			return nil, fmt.Errorf("maps line %d: mapping at %#x overlaps or precedes the one before it (ending at %#x)",
				n, mp.Start, m.Mappings[k-1].End)
		}
		m.Mappings = append(m.Mappings, mp)
	}
	return m, nil
}

// isBlank reports whether c separates the fields of a maps line.
func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// nextField splits the first blank-separated field off s, skipping leading
// blanks.
func nextField(s string) (field, rest string) {
	i := 0
	for i < len(s) && isBlank(s[i]) {
		i++
	}
	j := i
	for j < len(s) && !isBlank(s[j]) {
		j++
	}
	return s[i:j], s[j:]
}

// parseMapsLine parses one line of /proc/PID/maps, without its newline.
func parseMapsLine(line string) (Mapping, error) {
	var fields [5]string
	rest := line
	for i := range fields {
		fields[i], rest = nextField(rest)
		if fields[i] == "" {
			return Mapping{}, fmt.Errorf("want at least 5 fields, found %d", i)
		}
	}
	var m Mapping

	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return Mapping{}, fmt.Errorf("bad address range %q", fields[0])
	}
	var err1, err2 error
	m.Start, err1 = strconv.ParseUint(lo, 16, 64)
	m.End, err2 = strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil {
		return Mapping{}, fmt.Errorf("bad address range %q", fields[0])
	}
	if m.Start >= m.End {
		return Mapping{}, fmt.Errorf("empty address range %q", fields[0])
	}

	if !validPerms(fields[1]) {
		return Mapping{}, fmt.Errorf("bad permissions %q", fields[1])
	}
	m.Perms = fields[1]

	off, err := strconv.ParseUint(fields[2], 16, 64)
	if err != nil {
		return Mapping{}, fmt.Errorf("bad offset %q", fields[2])
	}
	m.Offset = off

	major, minor, ok := strings.Cut(fields[3], ":")
	if !ok || !isHex(major) || !isHex(minor) {
		return Mapping{}, fmt.Errorf("bad device %q", fields[3])
	}
	m.Dev = fields[3]

	ino, err := strconv.ParseUint(fields[4], 10, 64)
	if err != nil {
		return Mapping{}, fmt.Errorf("bad inode %q", fields[4])
	}
	m.Inode = ino

	i := 0
	for i < len(rest) && isBlank(rest[i]) {
		i++
	}
	m.Path = rest[i:]
	return m, nil
}

// validPerms reports whether p has the form of the permissions column,
// for example "r-xp" or "rw-s".
func validPerms(p string) bool {
	return len(p) == 4 &&
		(p[0] == 'r' || p[0] == '-') &&
		(p[1] == 'w' || p[1] == '-') &&
		(p[2] == 'x' || p[2] == '-') &&
		(p[3] == 'p' || p[3] == 's')
}

// isHex reports whether s is a non-empty run of hexadecimal digits of at
// most 8 characters (a device major or minor number).
func isHex(s string) bool {
	if s == "" || len(s) > 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// ReadMaps reads and parses /proc/PID/maps of process pid.
//
// The kernel lets a process read the maps of processes it could ptrace in
// read mode: its own user's processes, or any with CAP_SYS_PTRACE (root).
func ReadMaps(pid int) (*Maps, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("reading maps of process %d: %w", pid, err)
	}
	if len(data) == 0 {
		// Its main thread ended: another thread shows its maps.
		if dir := LiveTask(pid); dir != "" {
			if d, err := os.ReadFile(dir + "/maps"); err == nil {
				data = d
			}
		}
	}
	m, err := ParseMaps(data)
	if err != nil {
		return nil, fmt.Errorf("parsing maps of process %d: %w", pid, err)
	}
	return m, nil
}

// Find returns the mapping that holds pc, or nil if none does. It uses a
// binary search over the ascending mappings.
func (m *Maps) Find(pc uint64) *Mapping {
	if m == nil {
		return nil
	}
	i := m.index(pc)
	if i < 0 {
		return nil
	}
	return &m.Mappings[i]
}

// index returns the index of the mapping that holds pc, or -1.
func (m *Maps) index(pc uint64) int {
	i := sort.Search(len(m.Mappings), func(i int) bool { return m.Mappings[i].End > pc })
	if i < len(m.Mappings) && m.Mappings[i].Start <= pc {
		return i
	}
	return -1
}

// Deleted reports whether the mapped file was unlinked or replaced after it
// was mapped (its path ends in " (deleted)").
func (m *Mapping) Deleted() bool { return strings.HasSuffix(m.Path, deletedSuffix) }

// Name returns the mapping's path without a trailing " (deleted)", the name
// that Frame.MapName holds.
func (m *Mapping) Name() string { return strings.TrimSuffix(m.Path, deletedSuffix) }
