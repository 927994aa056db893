package output

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/mdtrace/mdtrace/abi"
)

// RecordType is the kind of a record_allocs entry.
type RecordType uint8

// The kinds of record_allocs entries, the probes' record types (enum
// record_type in abi/mdtrace_abi.h). The zero value is not a valid kind.
const (
	// RecordMalloc is malloc(size).
	RecordMalloc RecordType = abi.RecordMalloc
	// RecordCalloc is calloc(nmemb, size).
	RecordCalloc RecordType = abi.RecordCalloc
	// RecordMemalign is memalign, aligned_alloc, posix_memalign, valloc
	// or pvalloc.
	RecordMemalign RecordType = abi.RecordMemalign
	// RecordRealloc is realloc(old, size), including realloc(NULL, size)
	// and realloc(old, 0).
	RecordRealloc RecordType = abi.RecordRealloc
	// RecordFree is free(ptr) of a non-NULL pointer.
	RecordFree RecordType = abi.RecordFree
	// RecordThreadDone marks the end of a thread.
	RecordThreadDone RecordType = abi.RecordThreadDone
)

// recordNames are the type names of the record_allocs lines, indexed by
// RecordType.
var recordNames = [...]string{
	RecordMalloc:     "malloc",
	RecordCalloc:     "calloc",
	RecordMemalign:   "memalign",
	RecordRealloc:    "realloc",
	RecordFree:       "free",
	RecordThreadDone: "thread_done",
}

// String returns the name t has in a record_allocs line, such as "malloc",
// or "RecordType(N)" for a value that is not a kind of entry.
func (t RecordType) String() string {
	if t.valid() {
		return recordNames[t]
	}
	return "RecordType(" + strconv.Itoa(int(t)) + ")"
}

func (t RecordType) valid() bool {
	return t >= RecordMalloc && t <= RecordThreadDone
}

// Record is one entry of a record_allocs file.
type Record struct {
	// TID is the thread that made the call.
	TID  int32
	Type RecordType
	// Ptr is the pointer returned; for a free the freed pointer, for
	// thread_done 0.
	Ptr uint64
	// Size is the size of malloc, memalign and realloc, and the element
	// size of calloc.
	Size uint64
	// Arg is the element count of calloc, the alignment of memalign and
	// the old pointer of realloc; 0 for the other kinds.
	Arg uint64
	// StartNS and EndNS are the CLOCK_MONOTONIC times at which the call
	// started and ended, 0 when the line has none. A thread_done entry
	// has only EndNS, the time the thread ended.
	StartNS uint64
	EndNS   uint64
	// Present is PRESENT_BYTES of a free or realloc: how many bytes of
	// the old allocation were on resident pages. It is -1 when absent,
	// and always -1 for the other kinds.
	Present int64
	// PID is the process that made the call, when known (0 otherwise):
	// each process has its own record file. It is not written.
	PID int32
}

// maxRecordLen bounds the length of a line AppendRecord writes, newline
// included. The longest, a realloc with every field at its widest, is 143
// bytes; Android formats into a buffer of 256.
const maxRecordLen = 256

// ErrRecordType is returned by RecordWriter.Write for a record whose Type
// is not one of the RecordType constants.
var ErrRecordType = errors.New("unknown record type")

// AppendRecord appends to b the line, ended by a newline, that Android's
// malloc debug writes for r in the current record_allocs format, and
// returns the extended slice:
//
//	TID: malloc 0xPTR SIZE [START END]
//	TID: calloc 0xPTR NMEMB SIZE [START END]
//	TID: memalign 0xPTR ALIGN SIZE [START END]
//	TID: realloc 0xNEW 0xOLD SIZE [START END [PRESENT]]
//	TID: free 0xPTR [START END [PRESENT]]
//	TID: thread_done 0xPTR [END]
//
// As in Android, START and END are written when StartNS is not 0 or when
// PRESENT is written; PRESENT is written for a free or a realloc whose
// Present is not -1; the END of thread_done is written when it is not 0.
// Pointers are in lower-case hexadecimal.
//
// AppendRecord does not allocate when b has room for the line (at most 256
// bytes). For a record of an unknown Type it returns b unchanged.
func AppendRecord(b []byte, r *Record) []byte {
	if !r.Type.valid() {
		return b
	}
	b = strconv.AppendInt(b, int64(r.TID), 10)
	b = append(b, ": "...)
	b = append(b, recordNames[r.Type]...)
	b = append(b, " 0x"...)
	b = strconv.AppendUint(b, r.Ptr, 16)
	switch r.Type {
	case RecordMalloc:
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.Size, 10)
	case RecordCalloc, RecordMemalign:
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.Arg, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.Size, 10)
	case RecordRealloc:
		b = append(b, " 0x"...)
		b = strconv.AppendUint(b, r.Arg, 16)
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.Size, 10)
	case RecordThreadDone:
		if r.EndNS != 0 {
			b = append(b, ' ')
			b = strconv.AppendUint(b, r.EndNS, 10)
		}
		return append(b, '\n')
	}
	present := r.Present != -1 && (r.Type == RecordFree || r.Type == RecordRealloc)
	if r.StartNS != 0 || present {
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.StartNS, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.EndNS, 10)
	}
	if present {
		b = append(b, ' ')
		b = strconv.AppendInt(b, r.Present, 10)
	}
	return append(b, '\n')
}

// recordBufSize is the size of the chunks RecordWriter writes.
const recordBufSize = 64 << 10

// RecordWriter writes records as record_allocs lines (see AppendRecord),
// buffering them so that the underlying writer sees large chunks. Call
// Flush when done.
//
// Writing a record does not allocate. After the underlying writer fails,
// every call returns the same error and the records not yet written are
// lost. A RecordWriter is not safe for concurrent use.
type RecordWriter struct {
	w   io.Writer
	buf []byte
	err error
}

// NewRecordWriter returns a RecordWriter that writes to w.
func NewRecordWriter(w io.Writer) *RecordWriter {
	return &RecordWriter{w: w, buf: make([]byte, 0, recordBufSize)}
}

// Write adds the line of r to the buffer, first writing the buffer out
// when it is nearly full. It returns ErrRecordType, writing nothing, for a
// record of an unknown Type.
func (w *RecordWriter) Write(r *Record) error {
	if w.err != nil {
		return w.err
	}
	if !r.Type.valid() {
		return ErrRecordType
	}
	if cap(w.buf)-len(w.buf) < maxRecordLen {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	w.buf = AppendRecord(w.buf, r)
	return nil
}

// Flush writes the buffered lines to the underlying writer.
func (w *RecordWriter) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.w.Write(w.buf)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	w.buf = w.buf[:0]
	if err != nil {
		w.err = fmt.Errorf("writing records: %w", err)
		return w.err
	}
	return nil
}

// RecordParseError is the error ParseRecord and ReadRecords return for a
// malformed line.
type RecordParseError struct {
	// Line is the 1-based number of the line in the file read by
	// ReadRecords; 0 from ParseRecord.
	Line int
	// Msg is the message Android's memory_trace parser gives for the
	// line, such as "Failed to read malloc data: 1234: malloc 0xabd0000".
	Msg string
}

// Error returns Msg, preceded by the line number when there is one.
func (e *RecordParseError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return "record_allocs: line " + strconv.Itoa(e.Line) + ": " + e.Msg
}

// ParseRecord parses one line of a record_allocs file, with or without its
// newline. It reads the three versions Android has written:
//
//   - without times, before November 2022 ("186: malloc 0xb6038060 20");
//   - with START END after the arguments ("123: malloc 0x123 50 10 200");
//   - the current one, with PRESENT after the times of a free or realloc
//     and an optional END on thread_done ("123: free 0x123 60 2000 456").
//
// Like Android's memory_trace parser, it accepts pointers with or without
// "0x", any run of blanks between fields, and ignores what follows the
// last field it reads; a malloc, calloc or memalign has no PRESENT.
// Pointers are hexadecimal; TID and PRESENT are decimal with an optional
// sign, the other numbers unsigned decimal. A value that does not fit its
// field of Record is an error.
//
// A START of 0 means "no times" to Android's writer unless PRESENT
// follows, so in that case END is read as 0 too: the record then writes
// back, with AppendRecord, to a line that parses to the same record.
//
// Errors are *RecordParseError, whose message is Android's: "Failed to
// process line: ", "Failed to read malloc data: " (calloc, memalign and
// realloc data likewise), "Failed to read timestamps: ", "Failed to read
// present bytes: ", "Failed to read thread_done end time: " or "Unknown
// type X: ", followed by the line.
func ParseRecord(line string) (Record, error) {
	line = trimRecordNewline(line)
	r, msg := parseRecordLine(line)
	if msg != "" {
		return Record{}, &RecordParseError{Msg: msg + line}
	}
	return r, nil
}

// ReadRecords parses a record_allocs file, one record per line (see
// ParseRecord). Errors name the line.
func ReadRecords(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	var recs []Record
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		rec, msg := parseRecordLine(line)
		if msg != "" {
			return nil, &RecordParseError{Line: n, Msg: msg + string(line)}
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("record_allocs: reading line %d: %w", n+1, err)
	}
	return recs, nil
}

// trimRecordNewline removes a final "\n" or "\r\n".
func trimRecordNewline(s string) string {
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
		if len(s) > 0 && s[len(s)-1] == '\r' {
			s = s[:len(s)-1]
		}
	}
	return s
}

// The messages of Android's memory_trace parser; the line follows them.
const (
	msgRecordProcess    = "Failed to process line: "
	msgRecordTimestamps = "Failed to read timestamps: "
	msgRecordPresent    = "Failed to read present bytes: "
	msgRecordThreadDone = "Failed to read thread_done end time: "
)

// msgRecordData are the messages for missing or bad arguments, by RecordType.
var msgRecordData = [...]string{
	RecordMalloc:   "Failed to read malloc data: ",
	RecordCalloc:   "Failed to read calloc data: ",
	RecordMemalign: "Failed to read memalign data: ",
	RecordRealloc:  "Failed to read realloc data: ",
}

// recordScanner reads the fields of a line, string or []byte, the way the
// scanf conversions of Android's parser do: each number skips the blanks
// before it and stops at the first character that cannot continue it.
type recordScanner[T string | []byte] struct {
	s T
	i int
}

func isScanfSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// skip skips blanks and reports whether anything follows them.
func (l *recordScanner[T]) skip() bool {
	for l.i < len(l.s) && isScanfSpace(l.s[l.i]) {
		l.i++
	}
	return l.i < len(l.s)
}

// dec reads an unsigned decimal number.
func (l *recordScanner[T]) dec() (uint64, bool) {
	if !l.skip() {
		return 0, false
	}
	start := l.i
	var v uint64
	for l.i < len(l.s) {
		c := l.s[l.i]
		if c < '0' || c > '9' {
			break
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
		l.i++
	}
	return v, l.i > start
}

// signed reads a decimal number with an optional sign, between lo and hi.
func (l *recordScanner[T]) signed(lo, hi int64) (int64, bool) {
	if !l.skip() {
		return 0, false
	}
	neg := false
	if c := l.s[l.i]; c == '-' || c == '+' {
		neg = c == '-'
		l.i++
	}
	u, ok := l.dec0()
	if !ok {
		return 0, false
	}
	if neg {
		if u > uint64(-lo) {
			return 0, false
		}
		return -int64(u), true
	}
	if u > uint64(hi) {
		return 0, false
	}
	return int64(u), true
}

// dec0 reads digits at the current position, without skipping blanks.
func (l *recordScanner[T]) dec0() (uint64, bool) {
	if l.i < len(l.s) && isScanfSpace(l.s[l.i]) {
		return 0, false
	}
	return l.dec()
}

// hex reads a hexadecimal number with an optional "0x" or "0X".
func (l *recordScanner[T]) hex() (uint64, bool) {
	if !l.skip() {
		return 0, false
	}
	if l.i+1 < len(l.s) && l.s[l.i] == '0' && (l.s[l.i+1] == 'x' || l.s[l.i+1] == 'X') {
		l.i += 2
	}
	start := l.i
	var v uint64
	for l.i < len(l.s) {
		c := l.s[l.i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return v, l.i > start
		}
		if v>>60 != 0 {
			return 0, false
		}
		v = v<<4 | uint64(d)
		l.i++
	}
	return v, l.i > start
}

// word reads a run of non-blank characters and returns its bounds.
func (l *recordScanner[T]) word() (int, int, bool) {
	if !l.skip() {
		return 0, 0, false
	}
	start := l.i
	for l.i < len(l.s) && !isScanfSpace(l.s[l.i]) {
		l.i++
	}
	return start, l.i, true
}

// recordTypeAt returns the RecordType named by s[start:end], or 0.
func recordTypeAt[T string | []byte](s T, start, end int) RecordType {
	for t := RecordMalloc; t <= RecordThreadDone; t++ {
		name := recordNames[t]
		if end-start != len(name) {
			continue
		}
		match := true
		for k := range len(name) {
			if s[start+k] != name[k] {
				match = false
				break
			}
		}
		if match {
			return t
		}
	}
	return 0
}

// parseRecordLine parses line; on failure it returns the message that goes
// before the line.
func parseRecordLine[T string | []byte](line T) (Record, string) {
	l := recordScanner[T]{s: line}
	r := Record{Present: -1}

	// TID: TYPE POINTER
	tid, ok := l.signed(math.MinInt32, math.MaxInt32)
	if !ok || l.i >= len(line) || line[l.i] != ':' {
		return Record{}, msgRecordProcess
	}
	l.i++
	r.TID = int32(tid)
	ts, te, ok := l.word()
	if !ok {
		return Record{}, msgRecordProcess
	}
	if r.Ptr, ok = l.hex(); !ok {
		return Record{}, msgRecordProcess
	}
	r.Type = recordTypeAt(line, ts, te)

	switch r.Type {
	case RecordThreadDone:
		if !l.skip() {
			return r, ""
		}
		if r.EndNS, ok = l.dec(); !ok {
			return Record{}, msgRecordThreadDone
		}
		return r, ""
	case RecordMalloc:
		r.Size, ok = l.dec()
	case RecordCalloc, RecordMemalign:
		if r.Arg, ok = l.dec(); ok {
			r.Size, ok = l.dec()
		}
	case RecordRealloc:
		if r.Arg, ok = l.hex(); ok {
			r.Size, ok = l.dec()
		}
	case RecordFree:
		ok = true
	default:
		return Record{}, "Unknown type " + string(line[ts:te]) + ": "
	}
	if !ok {
		return Record{}, msgRecordData[r.Type]
	}

	// [START END]
	if !l.skip() {
		return r, ""
	}
	if r.StartNS, ok = l.dec(); ok {
		r.EndNS, ok = l.dec()
	}
	if !ok {
		return Record{}, msgRecordTimestamps
	}

	// [PRESENT], for free and realloc only.
	if (r.Type == RecordFree || r.Type == RecordRealloc) && l.skip() {
		if r.Present, ok = l.signed(math.MinInt64, math.MaxInt64); !ok {
			return Record{}, msgRecordPresent
		}
	}
	if r.StartNS == 0 && r.Present == -1 {
		r.EndNS = 0
	}
	return r, ""
}
