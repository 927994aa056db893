package output

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// snapshot builds a snapshot from allocations given in the order Android's
// test makes them; each gets its own stack id, and pointers grow.
func snapshot(btSize int, allocs ...struct {
	size   uint64
	zygote bool
	frames []uint64
}) *leak.Snapshot {
	s := &leak.Snapshot{PID: 4242, Stacks: map[uint64][]uint64{}, BacktraceSize: btSize}
	for i, a := range allocs {
		id := uint64(i + 1)
		s.Stacks[id] = a.frames
		s.Allocs = append(s.Allocs, leak.Alloc{
			Ptr: 0x7f0000001000 + uint64(i)*0x40, Size: a.size, Zygote: a.zygote, StackID: id,
		})
	}
	return s
}

type fa = struct {
	size   uint64
	zygote bool
	frames []uint64
}

// sanitize does what Android's SanitizeHeapData does before comparing a
// dump: it empties the fingerprint and replaces the maps with "MAP_DATA".
func sanitize(dump string) string {
	var out []string
	inMaps, sawMap := false, false
	for _, line := range strings.SplitAfter(dump, "\n") {
		switch {
		case inMaps && line == "END\n":
			if sawMap {
				out = append(out, "MAP_DATA\n")
			}
			inMaps = false
			out = append(out, line)
		case inMaps:
			sawMap = true
		case strings.HasPrefix(line, "Build fingerprint:"):
			out = append(out, "Build fingerprint: ''\n")
		default:
			inMaps = line == "MAPS\n"
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

func TestWriteHeapDumpGolden(t *testing.T) {
	btInfo := map[string][]stacks.Frame{
		fmt.Sprint([]uint64{0x1100, 0x1200}): {
			{PC: 0x1100, RelPC: 0x100, Func: "fake1", FuncOff: 10},
			{PC: 0x1200, RelPC: 0x200, Func: "fake2", FuncOff: 20},
		},
		fmt.Sprint([]uint64{0x1a000, 0x1b000}): {
			{PC: 0x1a000, RelPC: 0xa000, MapName: "/data/fake.so", Func: "level1"},
			{PC: 0x1b000, RelPC: 0xb000, MapName: "/data/fake.so", Func: "level2", FuncOff: 10},
		},
		fmt.Sprint([]uint64{0x1a000, 0x1b000, 0x1c000}): {
			{PC: 0x1a000, RelPC: 0xa000, Func: "func1"},
			{PC: 0x1b000, RelPC: 0xb000, Func: "func2", FuncOff: 10},
			{PC: 0x1c000, RelPC: 0xc000, FuncOff: 30},
		},
	}
	tests := []struct {
		golden      string
		fingerprint string
		snap        *leak.Snapshot
		full        bool
		android     string // Android's expected text after SanitizeHeapData
	}{
		{
			golden: "heapdump_dump_on_signal.txt",
			snap: snapshot(4,
				fa{100, true, []uint64{0x100, 0x200}},
				fa{40, true, []uint64{0x300, 0x400}},
				fa{200, true, []uint64{0x500, 0x600}},
				fa{10, false, []uint64{0xa000, 0xb000}},
				fa{50, false, []uint64{0xa100, 0xb200}},
				fa{5, false, []uint64{0xa300, 0xb300}},
			),
			android: `Android Native Heap Dump v1.2

Build fingerprint: ''

Total memory: 405
Allocation records: 6
Backtrace size: 4

z 0  sz       50  num    1  bt a100 b200
z 0  sz       10  num    1  bt a000 b000
z 0  sz        5  num    1  bt a300 b300
z 1  sz      200  num    1  bt 500 600
z 1  sz      100  num    1  bt 100 200
z 1  sz       40  num    1  bt 300 400
MAPS
MAP_DATA
END
`,
		},
		{
			golden: "heapdump_shared_backtrace.txt",
			snap: snapshot(4,
				fa{300, false, []uint64{0x100, 0x200}},
				fa{400, false, []uint64{0xa000, 0xb000, 0xc000}},
				fa{300, false, []uint64{0x100, 0x200}},
			),
			android: `Android Native Heap Dump v1.2

Build fingerprint: ''

Total memory: 1000
Allocation records: 2
Backtrace size: 4

z 0  sz      400  num    1  bt a000 b000 c000
z 0  sz      300  num    2  bt 100 200
MAPS
MAP_DATA
END
`,
		},
		{
			golden:      "heapdump_backtrace_full.txt",
			fingerprint: "debian/bookworm/x86_64:12/6.1.0-18-amd64:user/release-keys",
			snap: snapshot(4,
				fa{300, false, []uint64{0x1100, 0x1200}},
				fa{400, false, []uint64{0x1a000, 0x1b000}},
				fa{500, false, []uint64{0x1a000, 0x1b000, 0x1c000}},
			),
			full: true,
			android: `Android Native Heap Dump v1.2

Build fingerprint: ''

Total memory: 1200
Allocation records: 3
Backtrace size: 4

z 0  sz      500  num    1  bt 1a000 1b000 1c000
  bt_info {"" a000 "func1" 0} {"" b000 "func2" a} {"" c000 "" 0}
z 0  sz      400  num    1  bt 1a000 1b000
  bt_info {"/data/fake.so" a000 "level1" 0} {"/data/fake.so" b000 "level2" a}
z 0  sz      300  num    1  bt 1100 1200
  bt_info {"" 100 "fake1" a} {"" 200 "fake2" 14}
MAPS
MAP_DATA
END
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			d := &HeapDump{
				Fingerprint:   tt.fingerprint,
				BacktraceSize: tt.snap.BacktraceSize,
				Records:       tt.snap.UniqueList(false),
				Maps:          []byte(testMaps),
			}
			if tt.full {
				d.BtInfo = func(pcs []uint64) []stacks.Frame { return btInfo[fmt.Sprint(pcs)] }
			}
			var buf bytes.Buffer
			if err := WriteHeapDump(&buf, d); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.golden, buf.Bytes())
			if got := sanitize(buf.String()); got != tt.android {
				t.Errorf("sanitized dump differs from Android's expectation\n--- got ---\n%s--- want ---\n%s", got, tt.android)
			}
		})
	}
}

func TestWriteHeapDumpDetails(t *testing.T) {
	header := "Android Native Heap Dump v1.2\n\nBuild fingerprint: 'fp'\n\n"
	tests := []struct {
		name string
		d    HeapDump
		want string
	}{
		{
			name: "no maps",
			d:    HeapDump{Fingerprint: "fp", BacktraceSize: 16},
			want: header + "Total memory: 0\nAllocation records: 0\nBacktrace size: 16\n\n" +
				"MAPS\nCould not open /proc/self/maps\nEND\n",
		},
		{
			name: "empty maps",
			d:    HeapDump{Fingerprint: "fp", BacktraceSize: 16, Maps: []byte{}},
			want: header + "Total memory: 0\nAllocation records: 0\nBacktrace size: 16\n\nMAPS\nEND\n",
		},
		{
			name: "maps without final newline",
			d:    HeapDump{Fingerprint: "fp", BacktraceSize: 1, Maps: []byte("a\nb")},
			want: header + "Total memory: 0\nAllocation records: 0\nBacktrace size: 1\n\nMAPS\na\nb\nEND\n",
		},
		{
			// Android's dump_heap expectations: frames up to the first
			// zero, a record without frames ends in "bt", and a large size
			// is not cut to the 8 columns.
			name: "records",
			d: HeapDump{
				Fingerprint: "fp", BacktraceSize: 16, Maps: []byte("m\n"),
				Records: []leak.Record{
					{Size: 123456789, Num: 1, Frames: []uint64{0xf, 0xe, 0xd, 0xc}},
					{Size: 1000, Num: 1, Frames: []uint64{0xbc000, 0xbc001, 0xbc002, 0, 0xbc004}},
					{Zygote: true, Size: 100, Num: 12345},
				},
			},
			want: header + "Total memory: 124692289\nAllocation records: 3\nBacktrace size: 16\n\n" +
				"z 0  sz 123456789  num    1  bt f e d c\n" +
				"z 0  sz     1000  num    1  bt bc000 bc001 bc002\n" +
				"z 1  sz      100  num    12345  bt\n" +
				"MAPS\nm\nEND\n",
		},
		{
			// With backtrace_full, only records with frames get a bt_info
			// line; an unresolved frame shows an empty map name.
			name: "bt_info",
			d: HeapDump{
				Fingerprint: "fp", BacktraceSize: 4, Maps: []byte("m\n"),
				Records: []leak.Record{
					{Size: 8, Num: 2, Frames: []uint64{0x7f0000002a0}},
					{Size: 8, Num: 1},
				},
				BtInfo: func(pcs []uint64) []stacks.Frame {
					return []stacks.Frame{{PC: pcs[0], RelPC: 0x2a0, MapName: "/system/libc.so", Func: "abort", FuncOff: 0x24}}
				},
			},
			want: header + "Total memory: 24\nAllocation records: 2\nBacktrace size: 4\n\n" +
				"z 0  sz        8  num    2  bt 7f0000002a0\n" +
				"  bt_info {\"/system/libc.so\" 2a0 \"abort\" 24}\n" +
				"z 0  sz        8  num    1  bt\n" +
				"MAPS\nm\nEND\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteHeapDump(&buf, &tt.d); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Errorf("WriteHeapDump =\n%q\nwant\n%q", buf.String(), tt.want)
			}
		})
	}
}

type failWriter struct{ n int }

var errFail = errors.New("disk full")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n <= 0 {
		return 0, errFail
	}
	w.n--
	return len(p), nil
}

func TestWriteHeapDumpError(t *testing.T) {
	d := &HeapDump{BacktraceSize: 4, Maps: bytes.Repeat([]byte("x\n"), 100<<10)}
	if err := WriteHeapDump(&failWriter{n: 1}, d); !errors.Is(err, errFail) {
		t.Errorf("WriteHeapDump error = %v, want %v", err, errFail)
	}
}
