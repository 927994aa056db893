package output

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ParsedHeapDump is an Android Native Heap Dump read by ParseHeapDump.
type ParsedHeapDump struct {
	// Version is "v1.0", "v1.1" or "v1.2".
	Version string
	// Fingerprint is the text between the quotes of the "Build
	// fingerprint" line; "" when the dump has none (before v1.2).
	Fingerprint string
	// TotalMemory is the "Total memory" of the header, as written.
	TotalMemory uint64
	// BacktraceSize is the "Backtrace size" of the header.
	BacktraceSize int
	// Records are the allocation records, as many as the header's
	// "Allocation records" (ParseHeapDump; ScanHeapDump keeps none).
	Records []ParsedRecord
	// Maps is the text between the "MAPS" and "END" lines, each line
	// ended by a newline.
	Maps string
}

// ParsedRecord is one allocation record of a parsed heap dump.
type ParsedRecord struct {
	Zygote bool
	Size   uint64
	// Num is the number of allocations. It is always 1 in a v1.0 dump,
	// whose counts Android documents as unreliable.
	Num uint64
	// Frames are the pcs of the backtrace; zero-padded frames of v1.0 and
	// v1.1 dumps are read as numbers like the others.
	Frames []uint64
	// HasBtInfo tells whether a bt_info line (backtrace_full) follows the
	// record, and BtInfo holds its text after "bt_info", trimmed of spaces.
	HasBtInfo bool
	BtInfo    string
}

// ParseError is the error ParseHeapDump returns for a malformed dump.
type ParseError struct {
	// Line is the 1-based number of the offending line.
	Line int
	// Err says what is wrong with it.
	Err error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("heap dump: line %d: %v", e.Line, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

const (
	heapDumpMagic     = "Android Native Heap Dump "
	fingerprintPrefix = "Build fingerprint: '"
	totalPrefix       = "Total memory: "
	recordsPrefix     = "Allocation records: "
	btSizePrefix      = "Backtrace size: "
)

// heapDumpReader reads a dump line by line and numbers the lines.
type heapDumpReader struct {
	r    *bufio.Reader
	line int
}

// next returns the next line without its newline. At the end of the input
// it returns io.EOF; an unterminated last line is returned as a line.
func (h *heapDumpReader) next() (string, error) {
	s, err := h.r.ReadString('\n')
	if err == io.EOF && s != "" {
		err = nil
	}
	if err != nil {
		if err == io.EOF {
			return "", &ParseError{Line: h.line + 1, Err: io.ErrUnexpectedEOF}
		}
		return "", fmt.Errorf("heap dump: reading line %d: %w", h.line+1, err)
	}
	h.line++
	return strings.TrimSuffix(s, "\n"), nil
}

// errorf returns a ParseError for the line read last.
func (h *heapDumpReader) errorf(format string, args ...any) error {
	return &ParseError{Line: h.line, Err: fmt.Errorf(format, args...)}
}

// expect reads a line that must be exactly want.
func (h *heapDumpReader) expect(want string) error {
	s, err := h.next()
	if err != nil {
		return err
	}
	if s != want {
		return h.errorf("got %q, want %q", s, want)
	}
	return nil
}

// field reads a line "PREFIX NUMBER" and returns the number.
func (h *heapDumpReader) field(prefix string) (uint64, error) {
	s, err := h.next()
	if err != nil {
		return 0, err
	}
	v, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, h.errorf("got %q, want %q followed by a number", s, prefix)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, h.errorf("bad number in %q: %w", s, err)
	}
	return n, nil
}

// ParseHeapDump reads an Android Native Heap Dump of version v1.0, v1.1 or
// v1.2, as WriteHeapDump and Android's malloc debug write them. The
// fingerprint line is required in v1.2 and optional before. Records may be
// separated by any run of spaces, bt_info lines are kept as text, and
// anything after the END line is ignored. Errors of format are *ParseError
// values that name the offending line.
func ParseHeapDump(r io.Reader) (*ParsedHeapDump, error) {
	var records []ParsedRecord
	d, _, err := ScanHeapDump(r, func(rec *ParsedRecord) error {
		records = append(records, *rec)
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	d.Records = records
	return d, nil
}

// ScanHeapDump reads a heap dump as ParseHeapDump does, but hands each
// record to record, with its bt_info line, instead of keeping it: a dump
// of millions of records is read in the memory of one. The dump it
// returns has no Records; n is how many were read. progress,
// when set, is told every ProgressStep records how many were read of the
// header's count. An error of record ends the reading and is returned.
func ScanHeapDump(r io.Reader, record func(*ParsedRecord) error, progress func(done, total int)) (d *ParsedHeapDump, n int, err error) {
	d, n, err = scanHeapDump(r, record, progress)
	if err != nil {
		return nil, 0, err
	}
	return d, n, nil
}

func scanHeapDump(r io.Reader, record func(*ParsedRecord) error, progress func(done, total int)) (*ParsedHeapDump, int, error) {
	h := &heapDumpReader{r: bufio.NewReaderSize(r, 256<<10)}
	d := &ParsedHeapDump{}

	s, err := h.next()
	if err != nil {
		return nil, 0, err
	}
	v, ok := strings.CutPrefix(s, heapDumpMagic)
	if !ok {
		return nil, 0, h.errorf("not an Android Native Heap Dump: %q", s)
	}
	switch v {
	case "v1.0", "v1.1", "v1.2":
		d.Version = v
	default:
		return nil, 0, h.errorf("unsupported heap dump version %q", v)
	}
	if err := h.expect(""); err != nil {
		return nil, 0, err
	}

	s, err = h.next()
	if err != nil {
		return nil, 0, err
	}
	if fp, ok := strings.CutPrefix(s, fingerprintPrefix); ok {
		fp, ok = strings.CutSuffix(fp, "'")
		if !ok {
			return nil, 0, h.errorf("fingerprint without closing quote: %q", s)
		}
		d.Fingerprint = fp
		if err := h.expect(""); err != nil {
			return nil, 0, err
		}
		s, err = h.next()
		if err != nil {
			return nil, 0, err
		}
	} else if d.Version == "v1.2" {
		return nil, 0, h.errorf("got %q, want the build fingerprint of a v1.2 dump", s)
	}

	total, ok := strings.CutPrefix(s, totalPrefix)
	if !ok {
		return nil, 0, h.errorf("got %q, want %q followed by a number", s, totalPrefix)
	}
	if d.TotalMemory, err = strconv.ParseUint(total, 10, 64); err != nil {
		return nil, 0, h.errorf("bad number in %q: %w", s, err)
	}
	nrec, err := h.field(recordsPrefix)
	if err != nil {
		return nil, 0, err
	}
	btSize, err := h.field(btSizePrefix)
	if err != nil {
		return nil, 0, err
	}
	if btSize > math.MaxInt {
		return nil, 0, h.errorf("backtrace size %d out of range", btSize)
	}
	d.BacktraceSize = int(btSize)
	if err := h.expect(""); err != nil {
		return nil, 0, err
	}

	// A record is handed over when the line after it is read: it may be
	// its bt_info line.
	var (
		last    ParsedRecord
		pending bool
		count   int
	)
	flush := func() error {
		if !pending {
			return nil
		}
		pending = false
		count++
		if progress != nil && count%ProgressStep == 0 {
			progress(count, int(min(nrec, math.MaxInt)))
		}
		return record(&last)
	}
	for {
		s, err := h.next()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, 0, &ParseError{Line: h.line + 1, Err: errors.New("unexpected end of file, missing MAPS")}
			}
			return nil, 0, err
		}
		if s == "MAPS" {
			if err := flush(); err != nil {
				return nil, 0, err
			}
			if uint64(count) != nrec {
				return nil, 0, h.errorf("%d allocation records before MAPS, header says %d", count, nrec)
			}
			break
		}
		if info, ok := strings.CutPrefix(strings.TrimLeft(s, " "), "bt_info"); ok && (info == "" || info[0] == ' ') {
			if !pending {
				return nil, 0, h.errorf("bt_info line before any record")
			}
			if last.HasBtInfo {
				return nil, 0, h.errorf("second bt_info line for one record")
			}
			last.HasBtInfo = true
			last.BtInfo = strings.TrimSpace(info)
			continue
		}
		rec, err := parseRecord(s)
		if err != nil {
			return nil, 0, h.errorf("bad allocation record %q: %w", s, err)
		}
		if d.Version == "v1.0" {
			rec.Num = 1
		}
		if err := flush(); err != nil {
			return nil, 0, err
		}
		last, pending = rec, true
	}

	var maps strings.Builder
	for {
		s, err := h.next()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, 0, &ParseError{Line: h.line + 1, Err: errors.New("unexpected end of file, missing END")}
			}
			return nil, 0, err
		}
		if s == "END" {
			break
		}
		maps.WriteString(s)
		maps.WriteByte('\n')
	}
	d.Maps = maps.String()
	return d, count, nil
}

// parseRecord parses "z Z sz SIZE num NUM bt [FRAME...]".
func parseRecord(s string) (ParsedRecord, error) {
	var rec ParsedRecord
	f := strings.Fields(s)
	if len(f) < 7 || f[0] != "z" || f[2] != "sz" || f[4] != "num" || f[6] != "bt" {
		return rec, errors.New("want z Z sz SIZE num NUM bt FRAMES")
	}
	switch f[1] {
	case "0":
	case "1":
		rec.Zygote = true
	default:
		return rec, fmt.Errorf("zygote flag %q is not 0 or 1", f[1])
	}
	var err error
	if rec.Size, err = strconv.ParseUint(f[3], 10, 64); err != nil {
		return rec, fmt.Errorf("size: %w", err)
	}
	if rec.Num, err = strconv.ParseUint(f[5], 10, 64); err != nil {
		return rec, fmt.Errorf("num: %w", err)
	}
	if len(f) > 7 {
		rec.Frames = make([]uint64, 0, len(f)-7)
	}
	for _, x := range f[7:] {
		pc, err := strconv.ParseUint(x, 16, 64)
		if err != nil {
			return rec, fmt.Errorf("frame: %w", err)
		}
		rec.Frames = append(rec.Frames, pc)
	}
	return rec, nil
}
