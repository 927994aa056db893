package output

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/internal/benchproc"
	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// The heap dump of issue 7: a process with a million live allocations made
// from 20,000 call sites, whose backtraces of 16 frames run through 200
// mapped libraries.
const (
	bigAllocs = 1_000_000
	bigStacks = 20_000
	bigFrames = 16
	bigLibs   = 200
)

// bigMaps returns the maps of a process with bigLibs libraries, and
// whether they are this machine's real libraries, which the symbolizer can
// read. Without enough libraries, the maps name files that do not exist.
func bigMaps(tb testing.TB) (*stacks.Maps, bool) {
	tb.Helper()
	paths, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/*.so*")
	var text strings.Builder
	base := uint64(0x7f0000000000)
	seen := map[string]bool{}
	count := 0
	for _, p := range paths {
		if count == bigLibs {
			break
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		f, err := stacks.OpenELF(real)
		if err != nil || !f.Dyn || len(f.Symbols()) < 10 {
			continue
		}
		var end uint64
		for _, seg := range f.Loads {
			if seg.Flags&1 == 0 { // PF_X
				continue
			}
			start := (base + seg.VAddr) &^ 0xfff
			end = (base + seg.VAddr + seg.MemSize + 0xfff) &^ 0xfff
			fmt.Fprintf(&text, "%x-%x r-xp %08x 08:01 %d %s\n", start, end, seg.Offset&^0xfff, 1000+count, real)
		}
		if end == 0 {
			continue
		}
		// The library's data, as a process maps it after its code.
		fmt.Fprintf(&text, "%x-%x rw-p %08x 08:01 %d %s\n", end, end+0x2000, 0, 1000+count, real)
		base += 1 << 32
		count++
	}
	real := count == bigLibs
	if !real {
		text.Reset()
		base = 0x7f0000000000
		for i := range bigLibs {
			fmt.Fprintf(&text, "%x-%x r-xp 00001000 08:01 %d /nonexistent/lib%d.so\n", base, base+0x100000, 1000+i, i)
			base += 1 << 32
		}
	}
	maps, err := stacks.ParseMaps([]byte(text.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return maps, real
}

// bigSnapshot builds the live table of such a process. Call sites are
// skewed, as in real programs: a few allocate most blocks (a Zipf law over
// the 20,000 stacks). Each call site allocates mostly one size, its own,
// drawn from a log-uniform law from 8 bytes to 64 KiB; one block in five
// has a size drawn from the same law instead. Pointers grow with the
// allocation order, spaced by the sizes, as from a brk heap; 8 threads
// allocate.
func bigSnapshot(maps *stacks.Maps) *leak.Snapshot {
	rng := rand.New(rand.NewPCG(7, 11))
	var code []stacks.Mapping
	for _, m := range maps.Mappings {
		if strings.Contains(m.Perms, "x") {
			code = append(code, m)
		}
	}
	logSize := func() uint64 {
		return uint64(math.Exp(math.Log(8) + rng.Float64()*(math.Log(64<<10)-math.Log(8))))
	}
	s := &leak.Snapshot{PID: 4242, Stacks: make(map[uint64][]uint64, bigStacks), BacktraceSize: bigFrames}
	ids := make([]uint64, bigStacks)
	siteSize := make([]uint64, bigStacks)
	for i := range ids {
		frames := make([]uint64, bigFrames)
		for j := range frames {
			m := code[rng.IntN(len(code))]
			frames[j] = m.Start + rng.Uint64N(m.End-m.Start)
		}
		id := rng.Uint64() | 1 // the probes' ids are hashes of the frames, never 0
		ids[i] = id
		s.Stacks[id] = frames
		siteSize[i] = logSize()
	}
	zipf := rand.NewZipf(rng, 1.1, 1, bigStacks-1)
	s.Allocs = make([]leak.Alloc, bigAllocs)
	ptr := uint64(0x55d000000000)
	for i := range s.Allocs {
		site := zipf.Uint64()
		size := siteSize[site]
		if rng.IntN(5) == 0 {
			size = logSize()
		}
		s.Allocs[i] = leak.Alloc{
			Ptr:     ptr,
			Size:    size,
			StackID: ids[site],
		}
		ptr += (size+8+15)&^15 + 16*uint64(rng.IntN(4)) // the chunk, and some freed ones between
	}
	return s
}

// bigDump writes the heap dump of snap to path as mdtrace does: the unique
// records, then the dump written to a new file atomically; with sym, each
// record gets its bt_info line (backtrace_full). It returns the number of
// records and the time UniqueList took.
func bigDump(snap *leak.Snapshot, maps *stacks.Maps, sym *stacks.Symbolizer, path string) (int, time.Duration, error) {
	t0 := time.Now()
	d := bigHeapDump(snap, maps, sym)
	unique := time.Since(t0)
	err := WriteFileAtomic(path, 0o644, func(w io.Writer) error { return WriteHeapDump(w, d) })
	return len(d.Records), unique, err
}

func bigHeapDump(snap *leak.Snapshot, maps *stacks.Maps, sym *stacks.Symbolizer) *HeapDump {
	d := &HeapDump{
		Fingerprint:   "mdtrace/bench",
		BacktraceSize: snap.BacktraceSize,
		Records:       snap.UniqueList(false),
		Maps:          maps.Raw,
	}
	if sym != nil {
		d.BtInfo = func(pcs []uint64) []stacks.Frame { return sym.Symbolize(0, maps, pcs) }
	}
	return d
}

// BenchmarkHeapDump1M times the heap dump of a million live allocations:
// UniqueList and WriteHeapDump to a file, without and with the bt_info
// lines of backtrace_full (the symbolizer warm, as in a session, where each
// library is parsed when it is first mapped). Each mode also reports the
// peak resident memory of a process that makes one such dump (see
// TestHeapDump1MChild).
func BenchmarkHeapDump1M(b *testing.B) {
	maps, real := bigMaps(b)
	snap := bigSnapshot(maps)
	path := filepath.Join(b.TempDir(), "heap.txt")
	for _, mode := range []string{"plain", "full"} {
		b.Run(mode, func(b *testing.B) {
			var sym *stacks.Symbolizer
			if mode == "full" {
				if !real {
					b.Skipf("fewer than %d shared libraries with symbols on this machine", bigLibs)
				}
				sym = stacks.NewSymbolizer()
				for _, m := range maps.Mappings {
					sym.Symbolize(0, maps, []uint64{m.Start})
				}
			}
			var (
				recs   int
				unique time.Duration
			)
			for b.Loop() {
				n, u, err := bigDump(snap, maps, sym, path)
				if err != nil {
					b.Fatal(err)
				}
				recs = n
				unique += u
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/dump")
			b.ReportMetric(unique.Seconds()/float64(b.N), "s-UniqueList")
			fi, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			// The formatting alone, to no file.
			d := bigHeapDump(snap, maps, sym)
			t0 := time.Now()
			if err := WriteHeapDump(io.Discard, d); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(time.Since(t0).Seconds(), "s-format")
			b.ReportMetric(float64(recs), "records")
			b.ReportMetric(float64(fi.Size())/1e6, "MB-file")
			rss := childRSS(b, mode)
			b.ReportMetric(rss.PeakMB, "MB-peak-RSS")
			b.ReportMetric(rss.BaseMB, "MB-RSS-before")
		})
	}
}

// heapDumpRSS is what TestHeapDump1MChild measures: the resident memory
// of the process with its snapshot built, and its peak during the dump.
type heapDumpRSS struct {
	BaseMB, PeakMB float64
}

const heapDumpChildEnv = "MDTRACE_HEAPDUMP_CHILD"

// childRSS runs TestHeapDump1MChild in a new process of this test binary,
// so that no earlier benchmark's memory counts.
func childRSS(b *testing.B, mode string) heapDumpRSS {
	var r heapDumpRSS
	benchproc.Run(b, "TestHeapDump1MChild", []string{heapDumpChildEnv + "=" + mode, "MDTRACE_HEAPDUMP_DIR=" + b.TempDir()}, "RSS", &r)
	return r
}

// TestHeapDump1MChild is BenchmarkHeapDump1M's child process: it builds the
// snapshot, then resets the peak resident size (VmHWM, by writing 5 to
// /proc/self/clear_refs) and makes one dump, and prints the resident size
// before the dump and its peak during it. The peak counts the whole
// process, snapshot included, as in mdtrace.
func TestHeapDump1MChild(t *testing.T) {
	mode := os.Getenv(heapDumpChildEnv)
	if mode == "" {
		t.Skip("run by BenchmarkHeapDump1M")
	}
	maps, real := bigMaps(t)
	snap := bigSnapshot(maps)
	var sym *stacks.Symbolizer
	if mode == "full" && real {
		sym = stacks.NewSymbolizer()
		for _, m := range maps.Mappings {
			sym.Symbolize(0, maps, []uint64{m.Start})
		}
	}
	var r heapDumpRSS
	r.BaseMB = benchproc.ResetPeak(t)
	if _, _, err := bigDump(snap, maps, sym, filepath.Join(os.Getenv("MDTRACE_HEAPDUMP_DIR"), "heap.txt")); err != nil {
		t.Fatal(err)
	}
	r.PeakMB = benchproc.PeakMB(t)
	runtime.KeepAlive(snap)
	benchproc.Print("RSS", r)
}

func TestAppendHex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	vals := []uint64{0, 1, 9, 10, 15, 16, 255, 256, 0x7fffffffffff, math.MaxUint64}
	for range 10000 {
		vals = append(vals, rng.Uint64()>>rng.IntN(64))
	}
	for _, v := range vals {
		if got, want := string(appendHex([]byte("x"), v)), "x"+strconv.FormatUint(v, 16); got != want {
			t.Fatalf("appendHex(%d) = %q, want %q", v, got, want)
		}
	}
}

// TestHeapDumpRecordAllocs checks that a heap dump record's line is
// formatted without allocating, and that WriteHeapDump allocates per dump,
// not per record.
func TestHeapDumpRecordAllocs(t *testing.T) {
	frames := []uint64{0x7f0000001234, 0x55d0000a0b0c, 0x7ffd12345678, 0x401000}
	r := &leak.Record{Size: 123456, Num: 7, Frames: frames}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(1000, func() { buf = appendRecord(buf[:0], r) }); n != 0 {
		t.Errorf("appendRecord: %v allocations per record, want 0", n)
	}
	d := &HeapDump{BacktraceSize: 16, Maps: []byte("maps\n")}
	for i := range 20000 {
		d.Records = append(d.Records, leak.Record{Size: uint64(i), Num: 1, Frames: frames})
	}
	if n := testing.AllocsPerRun(5, func() { WriteHeapDump(io.Discard, d) }); n > 20 {
		t.Errorf("WriteHeapDump of %d records: %v allocations, want at most 20", len(d.Records), n)
	}
}
