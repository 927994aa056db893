package output

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// recordsDir holds the record_allocs fixtures.
const recordsDir = "../testdata/records"

// recordCases are lines in the current format with the records they hold.
// Each line is exactly what AppendRecord writes for its record.
var recordCases = []struct {
	name string
	line string
	rec  Record
}{
	// The outputs of Android's MemoryTraceTest, with and without times.
	{"malloc", "123: malloc 0x123 50",
		Record{TID: 123, Type: RecordMalloc, Ptr: 0x123, Size: 50, Present: -1}},
	{"malloc times", "123: malloc 0x123 50 10 200",
		Record{TID: 123, Type: RecordMalloc, Ptr: 0x123, Size: 50, StartNS: 10, EndNS: 200, Present: -1}},
	{"calloc", "123: calloc 0x123 400 200",
		Record{TID: 123, Type: RecordCalloc, Ptr: 0x123, Size: 200, Arg: 400, Present: -1}},
	{"calloc times", "123: calloc 0x123 400 200 15 315",
		Record{TID: 123, Type: RecordCalloc, Ptr: 0x123, Size: 200, Arg: 400, StartNS: 15, EndNS: 315, Present: -1}},
	{"memalign", "123: memalign 0x123 16 1024",
		Record{TID: 123, Type: RecordMemalign, Ptr: 0x123, Size: 1024, Arg: 16, Present: -1}},
	{"memalign times", "123: memalign 0x123 16 1024 23 289",
		Record{TID: 123, Type: RecordMemalign, Ptr: 0x123, Size: 1024, Arg: 16, StartNS: 23, EndNS: 289, Present: -1}},
	{"realloc", "123: realloc 0x123 0x125 300",
		Record{TID: 123, Type: RecordRealloc, Ptr: 0x123, Size: 300, Arg: 0x125, Present: -1}},
	{"realloc times", "123: realloc 0x123 0x125 300 45 1000",
		Record{TID: 123, Type: RecordRealloc, Ptr: 0x123, Size: 300, Arg: 0x125, StartNS: 45, EndNS: 1000, Present: -1}},
	{"free", "123: free 0x123",
		Record{TID: 123, Type: RecordFree, Ptr: 0x123, Present: -1}},
	{"free times", "123: free 0x123 60 2000",
		Record{TID: 123, Type: RecordFree, Ptr: 0x123, StartNS: 60, EndNS: 2000, Present: -1}},
	{"free present", "123: free 0x123 60 2000 456",
		Record{TID: 123, Type: RecordFree, Ptr: 0x123, StartNS: 60, EndNS: 2000, Present: 456}},
	{"free present without times", "123: free 0x123 0 0 456",
		Record{TID: 123, Type: RecordFree, Ptr: 0x123, Present: 456}},
	{"thread_done", "123: thread_done 0x0",
		Record{TID: 123, Type: RecordThreadDone, Present: -1}},
	{"thread_done end", "123: thread_done 0x0 2500",
		Record{TID: 123, Type: RecordThreadDone, EndNS: 2500, Present: -1}},

	// realloc(NULL, n) has no old allocation, so no PRESENT.
	{"realloc null", "77: realloc 0x7f001000 0x0 64 100 150",
		Record{TID: 77, Type: RecordRealloc, Ptr: 0x7f001000, Size: 64, StartNS: 100, EndNS: 150, Present: -1}},
	// realloc(p, 0) frees p.
	{"realloc to zero", "77: realloc 0x0 0x7f001000 0 200 260 64",
		Record{TID: 77, Type: RecordRealloc, Arg: 0x7f001000, StartNS: 200, EndNS: 260, Present: 64}},
	{"realloc present", "77: realloc 0x7f002000 0x7f001000 8192 300 400 4096",
		Record{TID: 77, Type: RecordRealloc, Ptr: 0x7f002000, Arg: 0x7f001000, Size: 8192, StartNS: 300, EndNS: 400, Present: 4096}},
	{"free nothing present", "77: free 0x7f002000 500 600 0",
		Record{TID: 77, Type: RecordFree, Ptr: 0x7f002000, StartNS: 500, EndNS: 600, Present: 0}},
	{"malloc zero", "77: malloc 0x7f003000 0 700 750",
		Record{TID: 77, Type: RecordMalloc, Ptr: 0x7f003000, StartNS: 700, EndNS: 750, Present: -1}},

	// The widest values of every field.
	{"negative tid", "-2147483648: free 0xffffffffffffffff 18446744073709551615 18446744073709551615 -9223372036854775808",
		Record{TID: math.MinInt32, Type: RecordFree, Ptr: math.MaxUint64, StartNS: math.MaxUint64, EndNS: math.MaxUint64, Present: math.MinInt64}},
	{"widest realloc", "2147483647: realloc 0xffffffffffffffff 0xffffffffffffffff 18446744073709551615 18446744073709551615 18446744073709551615 9223372036854775807",
		Record{TID: math.MaxInt32, Type: RecordRealloc, Ptr: math.MaxUint64, Arg: math.MaxUint64, Size: math.MaxUint64, StartNS: math.MaxUint64, EndNS: math.MaxUint64, Present: math.MaxInt64}},
}

func TestAppendRecord(t *testing.T) {
	for _, tt := range recordCases {
		t.Run(tt.name, func(t *testing.T) {
			got := string(AppendRecord([]byte("prefix|"), &tt.rec))
			if want := "prefix|" + tt.line + "\n"; got != want {
				t.Errorf("AppendRecord = %q, want %q", got, want)
			}
		})
	}
}

// TestAppendRecordAndroidRules checks when Android writes the optional
// fields of records the parser never produces.
func TestAppendRecordAndroidRules(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
		want string
	}{
		// Times go with a non-zero START only, as in Android.
		{"end without start", Record{TID: 1, Type: RecordMalloc, Ptr: 0x10, Size: 8, EndNS: 99, Present: -1},
			"1: malloc 0x10 8\n"},
		{"present on malloc ignored", Record{TID: 1, Type: RecordMalloc, Ptr: 0x10, Size: 8, StartNS: 5, EndNS: 6, Present: 8},
			"1: malloc 0x10 8 5 6\n"},
		{"present on thread_done ignored", Record{TID: 1, Type: RecordThreadDone, StartNS: 5, EndNS: 6, Present: 8},
			"1: thread_done 0x0 6\n"},
		{"free end without start", Record{TID: 1, Type: RecordFree, Ptr: 0x10, EndNS: 6, Present: -1},
			"1: free 0x10\n"},
		{"free present end without start", Record{TID: 1, Type: RecordFree, Ptr: 0x10, EndNS: 6, Present: 3},
			"1: free 0x10 0 6 3\n"},
		{"unused fields ignored", Record{TID: 1, Type: RecordFree, Ptr: 0x10, Size: 7, Arg: 9, Present: -1},
			"1: free 0x10\n"},
		{"unknown type", Record{TID: 1, Type: 0, Ptr: 0x10}, ""},
		{"type past the last", Record{TID: 1, Type: RecordThreadDone + 1, Ptr: 0x10}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendRecord(nil, &tt.rec)); got != tt.want {
				t.Errorf("AppendRecord = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseRecord(t *testing.T) {
	for _, tt := range recordCases {
		t.Run(tt.name, func(t *testing.T) {
			for _, line := range []string{tt.line, tt.line + "\n", tt.line + "\r\n"} {
				got, err := ParseRecord(line)
				if err != nil {
					t.Fatalf("ParseRecord(%q): %v", line, err)
				}
				if got != tt.rec {
					t.Errorf("ParseRecord(%q) = %+v, want %+v", line, got, tt.rec)
				}
			}
		})
	}
}

// TestParseRecordVersions reads lines of the older formats and of other
// writers, and checks the line AppendRecord writes for them.
func TestParseRecordVersions(t *testing.T) {
	tests := []struct {
		line string
		rec  Record
		out  string
	}{
		// The examples of Android's malloc debug README (no times).
		{"186: malloc 0xb6038060 20",
			Record{TID: 186, Type: RecordMalloc, Ptr: 0xb6038060, Size: 20, Present: -1}, ""},
		{"186: free 0xb6038060",
			Record{TID: 186, Type: RecordFree, Ptr: 0xb6038060, Present: -1}, ""},
		{"186: calloc 0xb609f080 32 4",
			Record{TID: 186, Type: RecordCalloc, Ptr: 0xb609f080, Arg: 32, Size: 4, Present: -1}, ""},
		{"186: realloc 0xb609f080 0xb603e9a0 12",
			Record{TID: 186, Type: RecordRealloc, Ptr: 0xb609f080, Arg: 0xb603e9a0, Size: 12, Present: -1}, ""},
		{"186: memalign 0x85423660 16 104",
			Record{TID: 186, Type: RecordMemalign, Ptr: 0x85423660, Arg: 16, Size: 104, Present: -1}, ""},
		{"186: memalign 0x85423660 4096 8192",
			Record{TID: 186, Type: RecordMemalign, Ptr: 0x85423660, Arg: 4096, Size: 8192, Present: -1}, ""},
		{"187: thread_done 0x0",
			Record{TID: 187, Type: RecordThreadDone, Present: -1}, ""},

		// The inputs of Android's MemoryTraceReadTest.
		{"1234: malloc 0xabd0000 20 1000 1020",
			Record{TID: 1234, Type: RecordMalloc, Ptr: 0xabd0000, Size: 20, StartNS: 1000, EndNS: 1020, Present: -1}, ""},
		{"1236: calloc 0x8000 50 30 700 1000",
			Record{TID: 1236, Type: RecordCalloc, Ptr: 0x8000, Arg: 50, Size: 30, StartNS: 700, EndNS: 1000, Present: -1}, ""},
		{"1237: realloc 0x9000 0x4000 80 3999 10020",
			Record{TID: 1237, Type: RecordRealloc, Ptr: 0x9000, Arg: 0x4000, Size: 80, StartNS: 3999, EndNS: 10020, Present: -1}, ""},
		{"1239: thread_done 0x0 290",
			Record{TID: 1239, Type: RecordThreadDone, EndNS: 290, Present: -1}, ""},

		// Pointers without 0x or in upper case, as %p and %x print them
		// on some systems, and free blanks as scanf reads them.
		{"186: malloc b6038060 20",
			Record{TID: 186, Type: RecordMalloc, Ptr: 0xb6038060, Size: 20, Present: -1}, "186: malloc 0xb6038060 20"},
		{"186: realloc 0XB609F080 0 12",
			Record{TID: 186, Type: RecordRealloc, Ptr: 0xb609f080, Size: 12, Present: -1}, "186: realloc 0xb609f080 0x0 12"},
		{"  186:malloc\t0x10   20 \t",
			Record{TID: 186, Type: RecordMalloc, Ptr: 0x10, Size: 20, Present: -1}, "186: malloc 0x10 20"},
		{"+186: free 0x10",
			Record{TID: 186, Type: RecordFree, Ptr: 0x10, Present: -1}, "186: free 0x10"},
		{"1: thread_done 0x7",
			Record{TID: 1, Type: RecordThreadDone, Ptr: 7, Present: -1}, "1: thread_done 0x7"},

		// What follows the last field is ignored, as in Android: a
		// malloc has no PRESENT, and a later field would be skipped.
		{"1: malloc 0x10 20 30 40 50",
			Record{TID: 1, Type: RecordMalloc, Ptr: 0x10, Size: 20, StartNS: 30, EndNS: 40, Present: -1}, "1: malloc 0x10 20 30 40"},
		{"1: free 0x10 30 40 50 extra",
			Record{TID: 1, Type: RecordFree, Ptr: 0x10, StartNS: 30, EndNS: 40, Present: 50}, "1: free 0x10 30 40 50"},
		{"1: thread_done 0x0 9 more",
			Record{TID: 1, Type: RecordThreadDone, EndNS: 9, Present: -1}, "1: thread_done 0x0 9"},

		// An explicit PRESENT of -1 is "absent".
		{"1: free 0x10 30 40 -1",
			Record{TID: 1, Type: RecordFree, Ptr: 0x10, StartNS: 30, EndNS: 40, Present: -1}, "1: free 0x10 30 40"},
		// A START of 0 without PRESENT means no times: Android writes
		// none, so END is dropped.
		{"1: malloc 0x10 20 0 40",
			Record{TID: 1, Type: RecordMalloc, Ptr: 0x10, Size: 20, Present: -1}, "1: malloc 0x10 20"},
		{"1: free 0x10 0 40 -1",
			Record{TID: 1, Type: RecordFree, Ptr: 0x10, Present: -1}, "1: free 0x10"},
		// With PRESENT, END is kept.
		{"1: free 0x10 0 40 8",
			Record{TID: 1, Type: RecordFree, Ptr: 0x10, EndNS: 40, Present: 8}, "1: free 0x10 0 40 8"},
	}
	for _, tt := range tests {
		got, err := ParseRecord(tt.line)
		if err != nil {
			t.Errorf("ParseRecord(%q): %v", tt.line, err)
			continue
		}
		if got != tt.rec {
			t.Errorf("ParseRecord(%q) = %+v, want %+v", tt.line, got, tt.rec)
		}
		want := tt.out
		if want == "" {
			want = tt.line
		}
		if out := string(AppendRecord(nil, &got)); out != want+"\n" {
			t.Errorf("AppendRecord(ParseRecord(%q)) = %q, want %q", tt.line, out, want+"\n")
		}
	}
}

func TestParseRecordErrors(t *testing.T) {
	tests := []struct {
		line string
		msg  string // the line follows it
	}{
		// The cases of Android's MemoryTraceReadTest.
		{"1234: malloc 0xabd0000", "Failed to read malloc data: "},
		{"1234: malloc", "Failed to process line: "},
		{"1234: malloc 0xabd0000 10 100", "Failed to read timestamps: "},
		{"1234: free", "Failed to process line: "},
		{"1234: free 0x100 100", "Failed to read timestamps: "},
		{"1236: calloc 0x8000 50", "Failed to read calloc data: "},
		{"1236: calloc 0x8000", "Failed to read calloc data: "},
		{"1236: calloc", "Failed to process line: "},
		{"1236: calloc 0x8000 50 20 100", "Failed to read timestamps: "},
		{"1237: realloc 0x9000 0x4000", "Failed to read realloc data: "},
		{"1237: realloc 0x9000", "Failed to read realloc data: "},
		{"1237: realloc", "Failed to process line: "},
		{"1237: realloc 0x9000 0x4000 10 500", "Failed to read timestamps: "},
		{"1238: memalign 0xa000 16", "Failed to read memalign data: "},
		{"1238: memalign 0xa000", "Failed to read memalign data: "},
		{"1238: memalign", "Failed to process line: "},
		{"1238: memalign 0xa000 16 10 800", "Failed to read timestamps: "},
		{"1240: thread_done", "Failed to process line: "},

		// The type is checked once TID, type and pointer are read.
		{"123: mmap 0x1000 4096", "Unknown type mmap: "},
		{"123: Malloc 0x1000 4096", "Unknown type Malloc: "},
		{"123: mmap", "Failed to process line: "},

		// PRESENT and the end of thread_done.
		{"123: free 0x123 60 2000 x", "Failed to read present bytes: "},
		{"123: realloc 0x1 0x2 3 60 2000 -", "Failed to read present bytes: "},
		{"123: free 0x123 60 2000 9223372036854775808", "Failed to read present bytes: "},
		{"123: thread_done 0x0 x", "Failed to read thread_done end time: "},
		{"123: thread_done 0x0 -5", "Failed to read thread_done end time: "},

		// Malformed headers.
		{"", "Failed to process line: "},
		{"   ", "Failed to process line: "},
		{"abc: malloc 0x1 2", "Failed to process line: "},
		{"123 malloc 0x1 2", "Failed to process line: "},
		{"123 : malloc 0x1 2", "Failed to process line: "},
		{"- 123: malloc 0x1 2", "Failed to process line: "},
		{"2147483648: malloc 0x1 2", "Failed to process line: "},
		{"-2147483649: malloc 0x1 2", "Failed to process line: "},
		{"123: malloc zz 2", "Failed to process line: "},
		{"123: malloc 0x 2", "Failed to process line: "},
		{"123: malloc 0x10000000000000000 2", "Failed to process line: "},

		// Bad numbers in the arguments and times.
		{"123: malloc 0x1 -2", "Failed to read malloc data: "},
		{"123: malloc 0x1 18446744073709551616", "Failed to read malloc data: "},
		{"123: calloc 0x1 2 x", "Failed to read calloc data: "},
		{"123: realloc 0x1 0xg 2", "Failed to read realloc data: "},
		{"123: malloc 0x1 2x", "Failed to read timestamps: "},
		{"123: malloc 0x1 2 3 x", "Failed to read timestamps: "},
		{"123: malloc 0x1 2 3 -4", "Failed to read timestamps: "},
		{"123: free 0x1 18446744073709551616 4", "Failed to read timestamps: "},
	}
	for _, tt := range tests {
		for _, line := range []string{tt.line, tt.line + "\n"} {
			r, err := ParseRecord(line)
			var pe *RecordParseError
			if !errors.As(err, &pe) {
				t.Errorf("ParseRecord(%q) = %+v, %v; want a *RecordParseError", line, r, err)
				continue
			}
			if want := tt.msg + tt.line; err.Error() != want || pe.Msg != want || pe.Line != 0 {
				t.Errorf("ParseRecord(%q) error = %q (line %d), want %q", line, err, pe.Line, want)
			}
			if r != (Record{}) {
				t.Errorf("ParseRecord(%q) returned %+v with its error", line, r)
			}
		}
	}
}

func TestRecordTypeString(t *testing.T) {
	want := []string{"RecordType(0)", "malloc", "calloc", "memalign", "realloc", "free", "thread_done", "RecordType(7)"}
	for i, w := range want {
		if got := RecordType(i).String(); got != w {
			t.Errorf("RecordType(%d).String() = %q, want %q", i, got, w)
		}
	}
}

// TestReadRecordsFixture reads a file mixing the three versions and writes
// it back in the current format.
func TestReadRecordsFixture(t *testing.T) {
	in, err := os.ReadFile(filepath.Join(recordsDir, "mixed.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(recordsDir, "mixed_current.txt"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ReadRecords(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(in, []byte("\n")); len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	var out bytes.Buffer
	w := NewRecordWriter(&out)
	for i := range recs {
		if err := w.Write(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("rewritten records differ\n--- got ---\n%s\n--- want ---\n%s", out.Bytes(), want)
	}

	// The current format reads back to the same records.
	again, err := ReadRecords(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if again[i] != recs[i] {
			t.Errorf("line %d: %+v read back as %+v", i+1, recs[i], again[i])
		}
	}
}

func TestReadRecords(t *testing.T) {
	recs, err := ReadRecords(strings.NewReader("1: malloc 0x10 5\r\n1: free 0x10"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{TID: 1, Type: RecordMalloc, Ptr: 0x10, Size: 5, Present: -1},
		{TID: 1, Type: RecordFree, Ptr: 0x10, Present: -1},
	}
	if len(recs) != len(want) || recs[0] != want[0] || recs[1] != want[1] {
		t.Errorf("ReadRecords = %+v, want %+v", recs, want)
	}

	recs, err = ReadRecords(strings.NewReader(""))
	if err != nil || len(recs) != 0 {
		t.Errorf("ReadRecords(empty) = %+v, %v; want nothing", recs, err)
	}

	errTests := []struct {
		in   string
		line int
		msg  string
	}{
		{"1: malloc 0x10 5\n1: malloc 0x10\n", 2, "Failed to read malloc data: 1: malloc 0x10"},
		{"1: malloc 0x10 5\n1: free 0x10\n\n1: free 0x20\n", 3, "Failed to process line: "},
		{"1: free 0x10 1 2 3\n1: free 0x10 1 2 3\n1: brk 0x10\n", 3, "Unknown type brk: 1: brk 0x10"},
	}
	for _, tt := range errTests {
		_, err := ReadRecords(strings.NewReader(tt.in))
		var pe *RecordParseError
		if !errors.As(err, &pe) || pe.Line != tt.line || pe.Msg != tt.msg {
			t.Errorf("ReadRecords(%q) error = %v, want line %d %q", tt.in, err, tt.line, tt.msg)
			continue
		}
		want := "record_allocs: line " + strconv.Itoa(tt.line) + ": " + tt.msg
		if err.Error() != want {
			t.Errorf("error = %q, want %q", err, want)
		}
	}

	// A line longer than any record is refused, naming it.
	long := "1: free 0x10\n1: malloc 0x10 5 " + strings.Repeat("1", 128<<10) + "\n"
	if _, err := ReadRecords(strings.NewReader(long)); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("ReadRecords(long line) error = %v, want one naming line 2", err)
	}

	// Read errors are passed on.
	boom := errors.New("boom")
	if _, err := ReadRecords(io.MultiReader(strings.NewReader("1: free 0x10\n"), iotestErrReader{boom})); !errors.Is(err, boom) {
		t.Errorf("ReadRecords(failing reader) error = %v, want %v", err, boom)
	}
}

// iotestErrReader fails every read with err.
type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

// chunkWriter records the sizes of the writes it gets.
type chunkWriter struct {
	bytes.Buffer
	sizes []int
	fail  error
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	if w.fail != nil {
		return 0, w.fail
	}
	w.sizes = append(w.sizes, len(p))
	return w.Buffer.Write(p)
}

func TestRecordWriter(t *testing.T) {
	var cw chunkWriter
	w := NewRecordWriter(&cw)
	var want []byte
	const n = 20000
	for i := range n {
		r := benchRecords[i%len(benchRecords)]
		r.TID += int32(i)
		if err := w.Write(&r); err != nil {
			t.Fatal(err)
		}
		want = AppendRecord(want, &r)
	}
	if len(cw.sizes) == 0 {
		t.Fatal("nothing written before Flush, want full chunks")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cw.Bytes(), want) {
		t.Fatal("written lines differ from AppendRecord's")
	}
	for _, s := range cw.sizes[:len(cw.sizes)-1] {
		if s < recordBufSize-maxRecordLen || s > recordBufSize {
			t.Errorf("chunk sizes %v: want all but the last within %d bytes of %d", cw.sizes, maxRecordLen, recordBufSize)
			break
		}
	}
	// Flush with nothing buffered writes nothing.
	nw := len(cw.sizes)
	if err := w.Flush(); err != nil || len(cw.sizes) != nw {
		t.Errorf("empty Flush: %v, %d writes; want none", err, len(cw.sizes)-nw)
	}

	// An unknown type is refused without writing anything.
	if err := w.Write(&Record{TID: 1, Ptr: 0x10}); !errors.Is(err, ErrRecordType) {
		t.Errorf("Write(unknown type) = %v, want ErrRecordType", err)
	}
	if err := w.Flush(); err != nil || len(cw.sizes) != nw {
		t.Errorf("Flush after a refused record: %v, %d writes; want none", err, len(cw.sizes)-nw)
	}
}

func TestRecordWriterErrors(t *testing.T) {
	boom := errors.New("disk full")
	cw := &chunkWriter{fail: boom}
	w := NewRecordWriter(cw)
	r := benchRecords[0]
	if err := w.Write(&r); err != nil {
		t.Fatalf("buffered Write = %v, want nil", err)
	}
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v, want %v", err, boom)
	}
	// The error sticks, even once the writer recovers.
	cw.fail = nil
	if err := w.Write(&r); !errors.Is(err, boom) {
		t.Errorf("Write after failure = %v, want %v", err, boom)
	}
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Errorf("Flush after failure = %v, want %v", err, boom)
	}
	if cw.Len() != 0 {
		t.Errorf("wrote %q after failure", cw.Bytes())
	}

	// A short write without an error is an error.
	w = NewRecordWriter(shortWriter{})
	_ = w.Write(&r)
	if err := w.Flush(); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("Flush to a short writer = %v, want io.ErrShortWrite", err)
	}
}

// shortWriter accepts one byte less than it is given.
type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return max(len(p)-1, 0), nil }

// TestMaxRecordLen checks that the longest possible line fits the space
// RecordWriter keeps for one.
func TestMaxRecordLen(t *testing.T) {
	longest := 0
	for typ := RecordMalloc; typ <= RecordThreadDone; typ++ {
		r := Record{TID: math.MinInt32, Type: typ, Ptr: math.MaxUint64, Size: math.MaxUint64, Arg: math.MaxUint64,
			StartNS: math.MaxUint64, EndNS: math.MaxUint64, Present: math.MinInt64}
		longest = max(longest, len(AppendRecord(nil, &r)))
	}
	if longest != 143 || longest > maxRecordLen {
		t.Errorf("longest line is %d bytes, want 143 (at most %d)", longest, maxRecordLen)
	}
}

// benchRecords are typical records of a traced process.
var benchRecords = []Record{
	{TID: 4242, Type: RecordMalloc, Ptr: 0x55d0c1a2b2a0, Size: 100, StartNS: 8731205010123, EndNS: 8731205010456, Present: -1},
	{TID: 4242, Type: RecordCalloc, Ptr: 0x55d0c1a2b320, Size: 16, Arg: 4, StartNS: 8731205011000, EndNS: 8731205011300, Present: -1},
	{TID: 4243, Type: RecordMemalign, Ptr: 0x7f3c2e401000, Size: 4096, Arg: 64, StartNS: 8731205012000, EndNS: 8731205013000, Present: -1},
	{TID: 4242, Type: RecordRealloc, Ptr: 0x55d0c1a2b400, Arg: 0x55d0c1a2b320, Size: 256, StartNS: 8731205014000, EndNS: 8731205014800, Present: 64},
	{TID: 4242, Type: RecordFree, Ptr: 0x55d0c1a2b2a0, StartNS: 8731205015000, EndNS: 8731205015100, Present: 100},
	{TID: 4243, Type: RecordThreadDone, EndNS: 8731205016000, Present: -1},
}

func TestRecordAllocs(t *testing.T) {
	buf := make([]byte, 0, maxRecordLen)
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		buf = AppendRecord(buf[:0], &benchRecords[i%len(benchRecords)])
		i++
	}); n != 0 {
		t.Errorf("AppendRecord: %v allocations per record, want 0", n)
	}

	w := NewRecordWriter(io.Discard)
	if n := testing.AllocsPerRun(100000, func() {
		_ = w.Write(&benchRecords[i%len(benchRecords)])
		i++
	}); n != 0 {
		t.Errorf("RecordWriter.Write: %v allocations per record, want 0", n)
	}
}

func BenchmarkAppendRecord(b *testing.B) {
	buf := make([]byte, 0, maxRecordLen)
	n := 0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = AppendRecord(buf[:0], &benchRecords[i%len(benchRecords)])
		n++
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkRecordWriter(b *testing.B) {
	w := NewRecordWriter(io.Discard)
	n := 0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := w.Write(&benchRecords[i%len(benchRecords)]); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkReadRecords(b *testing.B) {
	var file []byte
	for i := range 10000 {
		file = AppendRecord(file, &benchRecords[i%len(benchRecords)])
	}
	n := 0
	b.SetBytes(int64(len(file)))
	for b.Loop() {
		recs, err := ReadRecords(bytes.NewReader(file))
		if err != nil {
			b.Fatal(err)
		}
		n += len(recs)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

func FuzzParseRecord(f *testing.F) {
	for _, tt := range recordCases {
		f.Add(tt.line)
	}
	for _, s := range []string{
		"186: malloc b6038060 20", "1: free 0x10 0 40 -1", "1: free 0x10 0 40 8", "1: thread_done 0x7 9 x",
		"1234: malloc 0xabd0000 10 100", "123: mmap 0x1000 4096", "  186:malloc\t0x10   20 \t", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseRecord(line)
		if err != nil {
			var pe *RecordParseError
			if !errors.As(err, &pe) || !strings.HasSuffix(pe.Msg, trimRecordNewline(line)) {
				t.Fatalf("ParseRecord(%q) error %q does not end with the line", line, err)
			}
			return
		}
		out := AppendRecord(nil, &r)
		if len(out) > maxRecordLen {
			t.Fatalf("line of %d bytes for %+v", len(out), r)
		}
		again, err := ParseRecord(string(out))
		if err != nil {
			t.Fatalf("ParseRecord(%q) = %+v, written as %q, which does not parse: %v", line, r, out, err)
		}
		if again != r {
			t.Fatalf("ParseRecord(%q) = %+v, written as %q, read back as %+v", line, r, out, again)
		}
		// ReadRecords reads a line the same way.
		if !strings.ContainsAny(line, "\n\r") {
			recs, err := ReadRecords(strings.NewReader(line))
			if err != nil || len(recs) != 1 || recs[0] != r {
				t.Fatalf("ReadRecords(%q) = %+v, %v; want [%+v]", line, recs, err, r)
			}
		}
	})
}
