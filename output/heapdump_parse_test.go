package output

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

const v10Dump = `Android Native Heap Dump v1.0

Total memory: 1900
Allocation records: 2
Backtrace size: 2

z 0  sz      400  num    2  bt 0000a230 0000b500
z 1  sz      500  num    3  bt 0000b000 0000c000
MAPS
7fe9181000-7fe91a2000 rw-p 00000000 00:00 0 /system/lib/libc.so
END
`

const v11Dump = `Android Native Heap Dump v1.1

Total memory: 1900
Allocation records: 2
Backtrace size: 2

z 0 sz 400 num 1 bt 0000a230 0000b500
z 1 sz 500 num 3 bt 0000b000 0000c000
MAPS
7fe9181000-7fe91a2000 rw-p 00000000 00:00 0 /system/lib/libc.so
END
`

func TestParseHeapDumpVersions(t *testing.T) {
	maps := "7fe9181000-7fe91a2000 rw-p 00000000 00:00 0 /system/lib/libc.so\n"
	tests := []struct {
		name string
		in   string
		want *ParsedHeapDump
	}{
		{
			// v1.0 counts are unreliable and read as 1.
			name: "v1.0",
			in:   v10Dump,
			want: &ParsedHeapDump{
				Version: "v1.0", TotalMemory: 1900, BacktraceSize: 2, Maps: maps,
				Records: []ParsedRecord{
					{Size: 400, Num: 1, Frames: []uint64{0xa230, 0xb500}},
					{Zygote: true, Size: 500, Num: 1, Frames: []uint64{0xb000, 0xc000}},
				},
			},
		},
		{
			name: "v1.1",
			in:   v11Dump,
			want: &ParsedHeapDump{
				Version: "v1.1", TotalMemory: 1900, BacktraceSize: 2, Maps: maps,
				Records: []ParsedRecord{
					{Size: 400, Num: 1, Frames: []uint64{0xa230, 0xb500}},
					{Zygote: true, Size: 500, Num: 3, Frames: []uint64{0xb000, 0xc000}},
				},
			},
		},
		{
			// The example of malloc_debug.md, with a record without
			// frames, an empty bt_info, nothing after END's newline and
			// text after END ignored.
			name: "v1.2",
			in: "Android Native Heap Dump v1.2\n\n" +
				"Build fingerprint: 'google/taimen/taimen:8.1.0/OPM2.171026.006.C1/4769658:user/release-keys'\n\n" +
				"Total memory: 410\nAllocation records: 3\nBacktrace size: 16\n\n" +
				"z 0  sz      400  num    1  bt a2a0 b510\n" +
				`  bt_info {"/system/libc.so" 2a0 "abort" 24} {"/system/libutils.so" 510 "" 0}` + "\n" +
				"z 0  sz        5  num    1  bt\n" +
				"z 1  sz        5  num    1  bt 1\n" +
				"  bt_info\n" +
				"MAPS\nEND\ntrailing text\n",
			want: &ParsedHeapDump{
				Version:       "v1.2",
				Fingerprint:   "google/taimen/taimen:8.1.0/OPM2.171026.006.C1/4769658:user/release-keys",
				TotalMemory:   410,
				BacktraceSize: 16,
				Records: []ParsedRecord{
					{Size: 400, Num: 1, Frames: []uint64{0xa2a0, 0xb510}, HasBtInfo: true,
						BtInfo: `{"/system/libc.so" 2a0 "abort" 24} {"/system/libutils.so" 510 "" 0}`},
					{Size: 5, Num: 1},
					{Zygote: true, Size: 5, Num: 1, Frames: []uint64{1}, HasBtInfo: true},
				},
			},
		},
		{
			name: "no final newline",
			in:   "Android Native Heap Dump v1.2\n\nBuild fingerprint: ''\n\nTotal memory: 0\nAllocation records: 0\nBacktrace size: 4\n\nMAPS\nCould not open /proc/self/maps\nEND",
			want: &ParsedHeapDump{Version: "v1.2", BacktraceSize: 4, Maps: "Could not open /proc/self/maps\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHeapDump(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseHeapDump =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseHeapDumpGolden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(goldenDir, "heapdump_backtrace_full.txt"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseHeapDump(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	want := &ParsedHeapDump{
		Version:       "v1.2",
		Fingerprint:   "debian/bookworm/x86_64:12/6.1.0-18-amd64:user/release-keys",
		TotalMemory:   1200,
		BacktraceSize: 4,
		Records: []ParsedRecord{
			{Size: 500, Num: 1, Frames: []uint64{0x1a000, 0x1b000, 0x1c000}, HasBtInfo: true,
				BtInfo: `{"" a000 "func1" 0} {"" b000 "func2" a} {"" c000 "" 0}`},
			{Size: 400, Num: 1, Frames: []uint64{0x1a000, 0x1b000}, HasBtInfo: true,
				BtInfo: `{"/data/fake.so" a000 "level1" 0} {"/data/fake.so" b000 "level2" a}`},
			{Size: 300, Num: 1, Frames: []uint64{0x1100, 0x1200}, HasBtInfo: true,
				BtInfo: `{"" 100 "fake1" a} {"" 200 "fake2" 14}`},
		},
		Maps: testMaps,
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("ParseHeapDump =\n%+v\nwant\n%+v", d, want)
	}
}

func TestParseHeapDumpErrors(t *testing.T) {
	const head = "Android Native Heap Dump v1.2\n\nBuild fingerprint: ''\n\n"      // lines 1-4
	const counts = "Total memory: 8\nAllocation records: 1\nBacktrace size: 4\n\n" // lines 5-8
	tests := []struct {
		name string
		in   string
		line int
		msg  string
	}{
		{"empty", "", 1, "unexpected EOF"},
		{"not a dump", "hello\n", 1, "not an Android Native Heap Dump"},
		{"version", "Android Native Heap Dump v2.0\n\n", 1, `unsupported heap dump version "v2.0"`},
		{"no blank", "Android Native Heap Dump v1.2\nx\n", 2, `want ""`},
		{"v1.2 without fingerprint", "Android Native Heap Dump v1.2\n\nTotal memory: 8\n", 3, "want the build fingerprint"},
		{"unclosed fingerprint", "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'abc\n", 3, "closing quote"},
		{"bad total", head + "Total memory: x\n", 5, `bad number in "Total memory: x"`},
		{"missing records", head + "Total memory: 8\nBacktrace size: 4\n", 6, `want "Allocation records: "`},
		{"bad backtrace size", head + "Total memory: 8\nAllocation records: 1\nBacktrace size: -1\n", 7, "bad number"},
		{"huge backtrace size", head + "Total memory: 8\nAllocation records: 1\nBacktrace size: 18446744073709551615\n", 7, "out of range"},
		{"truncated header", head + "Total memory: 8\n", 6, "unexpected EOF"},
		{"bad zygote", head + counts + "z 2  sz 8  num 1  bt\n", 9, "zygote flag"},
		{"bad size", head + counts + "z 0  sz -8  num 1  bt\n", 9, "size:"},
		{"bad num", head + counts + "z 0  sz 8  num x  bt\n", 9, "num:"},
		{"bad frame", head + counts + "z 0  sz 8  num 1  bt 0x10\n", 9, "frame:"},
		{"missing bt", head + counts + "z 0  sz 8  num 1\n", 9, "want z Z sz SIZE"},
		{"blank record", head + counts + "\n", 9, "bad allocation record"},
		{"bt_info first", head + counts + "  bt_info {}\n", 9, "bt_info line before any record"},
		{"two bt_info", head + counts + "z 0 sz 8 num 1 bt 1\n  bt_info\n  bt_info\n", 11, "second bt_info"},
		{"count mismatch", head + counts + "MAPS\nEND\n", 9, "0 allocation records before MAPS, header says 1"},
		{"no MAPS", head + counts + "z 0 sz 8 num 1 bt 1\n", 10, "unexpected end of file, missing MAPS"},
		{"no END", head + counts + "z 0 sz 8 num 1 bt 1\nMAPS\nmap line\n", 12, "missing END"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseHeapDump(strings.NewReader(tt.in))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error = %v, want a *ParseError", err)
			}
			if pe.Line != tt.line || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error = %q (line %d), want line %d and %q", err, pe.Line, tt.line, tt.msg)
			}
			if !strings.HasPrefix(err.Error(), "heap dump: line ") {
				t.Errorf("error %q does not start with the line", err)
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errFail }

func TestParseHeapDumpReadError(t *testing.T) {
	if _, err := ParseHeapDump(errReader{}); !errors.Is(err, errFail) {
		t.Errorf("error = %v, want %v", err, errFail)
	}
}

// toHeapDump turns a parsed dump without bt_info lines back into what
// WriteHeapDump writes.
func toHeapDump(p *ParsedHeapDump) *HeapDump {
	d := &HeapDump{Fingerprint: p.Fingerprint, BacktraceSize: p.BacktraceSize, Maps: []byte(p.Maps)}
	for _, r := range p.Records {
		d.Records = append(d.Records, leak.Record{Zygote: r.Zygote, Size: r.Size, Num: r.Num, Frames: r.Frames})
	}
	return d
}

// roundTrippable tells whether WriteHeapDump can reproduce p: it cannot
// write bt_info text it did not resolve, nor zero frames (Android stops at
// the first one).
func roundTrippable(p *ParsedHeapDump) bool {
	for _, r := range p.Records {
		if r.HasBtInfo || slices.Contains(r.Frames, 0) {
			return false
		}
	}
	return true
}

func FuzzParseHeapDump(f *testing.F) {
	for _, name := range []string{"heapdump_dump_on_signal.txt", "heapdump_shared_backtrace.txt", "heapdump_backtrace_full.txt"} {
		b, err := os.ReadFile(filepath.Join(goldenDir, name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(v10Dump))
	f.Add([]byte(v11Dump))
	f.Add([]byte("Android Native Heap Dump v1.2\n\nBuild fingerprint: 'a'b'\n\nTotal memory: 0\nAllocation records: 0\nBacktrace size: 0\n\nMAPS\nEND"))
	f.Add([]byte("Android Native Heap Dump v1.1\n\nTotal memory: 1\nAllocation records: 1\nBacktrace size: 1\n\nz 1 sz 1 num 1 bt 0 1\nMAPS\nEND\n"))

	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := ParseHeapDump(bytes.NewReader(in))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line < 1 {
				t.Fatalf("error %v is not a *ParseError with a line", err)
			}
			return
		}
		if !roundTrippable(p) {
			return
		}
		var buf bytes.Buffer
		if err := WriteHeapDump(&buf, toHeapDump(p)); err != nil {
			t.Fatal(err)
		}
		q, err := ParseHeapDump(&buf)
		if err != nil {
			t.Fatalf("parsing the written dump: %v\n%s", err, buf.Bytes())
		}
		// The writer writes v1.2 and computes the total from the records.
		want := *p
		want.Version = HeapDumpVersion
		want.TotalMemory = leak.TotalMemory(toHeapDump(p).Records)
		if !reflect.DeepEqual(q, &want) {
			t.Fatalf("round trip differs:\n got %+v\nwant %+v", q, &want)
		}
	})
}

// FuzzWriteHeapDump checks that any dump WriteHeapDump writes parses back
// to the same records, header and maps.
func FuzzWriteHeapDump(f *testing.F) {
	f.Add("fp", uint8(4), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, "m\n", true)
	f.Add("", uint8(0), []byte{}, "", false)
	f.Fuzz(func(t *testing.T, fp string, btSize uint8, data []byte, maps string, full bool) {
		if strings.ContainsAny(fp, "\n") || strings.Contains("\n"+maps, "\nEND\n") || strings.HasSuffix("\n"+maps, "\nEND") {
			return
		}
		d := &HeapDump{Fingerprint: fp, BacktraceSize: int(btSize), Maps: []byte(maps)}
		for len(data) >= 3 {
			r := leak.Record{Zygote: data[0]&1 == 1, Size: uint64(data[1]) << (data[0] & 0x3e), Num: uint64(data[2]) + 1}
			n := int(data[0]>>6) + 1
			data = data[3:]
			for i := 0; i < n && len(data) > 0; i++ {
				r.Frames = append(r.Frames, uint64(data[0])<<(4*i)+1)
				data = data[1:]
			}
			d.Records = append(d.Records, r)
		}
		if full {
			d.BtInfo = func(pcs []uint64) []stacks.Frame {
				var fs []stacks.Frame
				for i, pc := range pcs {
					f := stacks.Frame{PC: pc, RelPC: pc & 0xfff}
					if i%2 == 0 {
						f.MapName, f.Func, f.FuncOff = "/lib/x.so", "f", pc&0xf
					}
					fs = append(fs, f)
				}
				return fs
			}
		}
		var buf bytes.Buffer
		if err := WriteHeapDump(&buf, d); err != nil {
			t.Fatal(err)
		}
		p, err := ParseHeapDump(&buf)
		if err != nil {
			t.Fatalf("%v\n%s", err, buf.Bytes())
		}
		wantMaps := maps
		if wantMaps != "" && !strings.HasSuffix(wantMaps, "\n") {
			wantMaps += "\n"
		}
		if p.Version != HeapDumpVersion || p.Fingerprint != fp || p.BacktraceSize != int(btSize) ||
			p.TotalMemory != leak.TotalMemory(d.Records) || p.Maps != wantMaps || len(p.Records) != len(d.Records) {
			t.Fatalf("parsed %+v from %+v", p, d)
		}
		for i, r := range p.Records {
			w := d.Records[i]
			if r.Zygote != w.Zygote || r.Size != w.Size || r.Num != w.Num || !slices.Equal(r.Frames, w.Frames) ||
				r.HasBtInfo != (full && len(w.Frames) > 0) {
				t.Fatalf("record %d: parsed %+v, wrote %+v", i, r, w)
			}
		}
	})
}
