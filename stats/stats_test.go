package stats

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
)

var update = flag.Bool("update", false, "rewrite the golden files in ../testdata/golden")

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("../testdata/golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

// run adds calls, each "TID KIND PTR SIZE ARG START END STACK", through an
// Orderer whose watermark is each call's start.
func run(t *testing.T, lines string) (*Stats, *Orderer) {
	t.Helper()
	o := NewOrderer(New())
	kinds := map[string]output.RecordType{"malloc": output.RecordMalloc, "calloc": output.RecordCalloc, "memalign": output.RecordMemalign,
		"realloc": output.RecordRealloc, "free": output.RecordFree, "thread_done": output.RecordThreadDone}
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		var c Call
		var kind string
		if _, err := fmtSscan(l, &c.TID, &kind, &c.Ptr, &c.Size, &c.Arg, &c.StartNS, &c.EndNS, &c.Stack); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		c.Type = kinds[kind]
		o.Push(c, c.StartNS)
	}
	o.Flush()
	return o.Stats(), o
}

// TestStatsFigures: the totals, the temporary allocations (freed with no
// other allocation by their thread between, a realloc being a free and an
// allocation), the peak and its time, the sizes and the call sites.
func TestStatsFigures(t *testing.T) {
	s, o := run(t, `
1 malloc 100 10 0 1000 1100 7
1 free 100 0 0 1200 1300 0
1 malloc 200 20 0 1400 1500 7
2 calloc 300 8 4 1450 1550 8
1 free 200 0 0 1600 1700 0
1 realloc 400 64 0 1800 1900 9
1 realloc 500 4096 400 2000 2100 9
2 malloc 0 99 0 2150 2160 0
1 free 999 0 0 2200 2300 0
2 free 300 0 0 2400 2500 0
2 thread_done 0 0 0 0 2600 0
`)
	if o.Late != 0 {
		t.Errorf("late %d", o.Late)
	}
	// Temporary: 100 and 200 (thread 2's calloc between is another
	// thread's), 400 (realloc'd at once) and 300 (thread 2's failed
	// malloc between made no block).
	if s.Allocs != 5 || s.AllocBytes != 10+20+32+64+4096 || s.Temporary != 4 || s.Failed != 1 || s.UnknownFrees != 1 || s.Frees != 4 {
		t.Errorf("allocs %d bytes %d temporary %d failed %d unknown %d frees %d", s.Allocs, s.AllocBytes, s.Temporary, s.Failed, s.UnknownFrees, s.Frees)
	}
	if s.PeakBytes != 4096+32 || s.PeakBlocks != 2 || s.PeakNS != 2100 || s.FirstNS != 1100 || s.LiveBytes != 4096 || s.LiveBlocks != 1 {
		t.Errorf("peak %d in %d at %d, first %d, live %d in %d", s.PeakBytes, s.PeakBlocks, s.PeakNS, s.FirstNS, s.LiveBytes, s.LiveBlocks)
	}
	frames := func(id uint64) []stacks.Frame {
		return []stacks.Frame{{PC: 0x1000 + id, RelPC: 0x100 + id, MapName: "/bin/prog", Func: "site" + string(rune('0'+id)), FuncOff: 4}}
	}
	var b bytes.Buffer
	if err := s.Write(&b, Options{Frames: frames, Top: 2, Notes: []string{"a note"}}); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "stats_figures.txt", b.Bytes())
}

// TestStatsOrder: a block freed by one thread whose address another gets
// back before the free's record comes: taken by their times, the free
// comes first, and nothing is counted reused or lost.
func TestStatsOrder(t *testing.T) {
	o := NewOrderer(New())
	// Thread 1 has block 0x100; thread 2 frees it (from 1000 to 1500),
	// thread 1 gets the address back (from 900 to 1200) before the
	// free's record, sent at its end, comes.
	o.Push(Call{TID: 1, Type: output.RecordMalloc, Ptr: 0x100, Size: 10, StartNS: 100, EndNS: 200}, 0)
	o.Push(Call{TID: 1, Type: output.RecordMalloc, Ptr: 0x100, Size: 20, StartNS: 900, EndNS: 1200}, 1200-250)
	o.Push(Call{TID: 2, Type: output.RecordFree, Ptr: 0x100, StartNS: 1000, EndNS: 1500}, 1500-250)
	o.Flush()
	s := o.Stats()
	if s.Reused != 0 || s.UnknownFrees != 0 || s.LiveBytes != 20 || s.LiveBlocks != 1 || o.Late != 0 || s.PeakBytes != 20 {
		t.Errorf("reused %d unknown %d live %d in %d late %d peak %d", s.Reused, s.UnknownFrees, s.LiveBytes, s.LiveBlocks, o.Late, s.PeakBytes)
	}
	// The same with a watermark that had let the allocation go: the
	// free comes late, and is counted so.
	o = NewOrderer(New())
	o.Push(Call{TID: 1, Type: output.RecordMalloc, Ptr: 0x100, Size: 10, StartNS: 100, EndNS: 200}, 0)
	o.Push(Call{TID: 1, Type: output.RecordMalloc, Ptr: 0x100, Size: 20, StartNS: 900, EndNS: 1200}, 1300)
	o.Push(Call{TID: 2, Type: output.RecordFree, Ptr: 0x100, StartNS: 1000, EndNS: 1500}, 1500)
	o.Flush()
	if o.Late != 1 || o.Stats().Reused != 1 {
		t.Errorf("late %d reused %d; want 1 and 1", o.Late, o.Stats().Reused)
	}
}

// TestStatsNoTimes: calls without times (an old record file) are taken in
// their order, and the peak is placed by its call, not by a time.
func TestStatsNoTimes(t *testing.T) {
	s, _ := run(t, `
1 malloc 100 10 0 0 0 0
1 malloc 200 20 0 0 0 0
1 free 100 0 0 0 0 0
`)
	var b bytes.Buffer
	s.Write(&b, Options{NoSites: "none in this test"})
	for _, want := range []string{
		"Peak live heap: 30 bytes in 2 blocks, at call 2 of 3 (the calls have no times)\n",
		"\nCall sites: none in this test\n",
		"Temporary allocations: 0 (0.0% of the allocations), freed with no other allocation by their thread between\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}
