package leak

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// fake is one allocation of a ported Android unit test, in the order the
// test makes them.
type fake struct {
	size   uint64
	zygote bool
	frames []uint64 // the fake backtrace; nil: the unwinder found no frame
	noBT   bool     // backtracing was off: StackID 0
}

// variant says how a fixture turns fakes into a Snapshot. Android's tests
// do not depend on the pointers the allocator returns, nor on how frames are
// deduplicated, so each port runs under every variant and must give the
// same answer.
type variant struct {
	name       string
	descending bool // pointers decrease in allocation order
	sharedIDs  bool // identical frames share one stack id, as Android's hash_index
}

var variants = []variant{
	{"ptr-asc/ids-shared", false, true},
	{"ptr-asc/ids-distinct", false, false},
	{"ptr-desc/ids-shared", true, true},
	{"ptr-desc/ids-distinct", true, false},
}

func build(v variant, btSize int, fakes []fake) *Snapshot {
	s := &Snapshot{PID: 1234, Stacks: map[uint64][]uint64{}, BacktraceSize: btSize}
	byFrames := map[string]uint64{}
	nextID := uint64(100)
	for i, f := range fakes {
		ptr := uint64(0x10000 + 0x100*i)
		if v.descending {
			ptr = uint64(0x10000 + 0x100*(len(fakes)-i))
		}
		a := Alloc{Ptr: ptr, Size: f.size, Zygote: f.zygote}
		if !f.noBT {
			key := fmt.Sprint(f.frames)
			id, ok := byFrames[key]
			if !ok || !v.sharedIDs {
				nextID++
				id = nextID
				byFrames[key] = id
				s.Stacks[id] = slices.Clone(f.frames)
			}
			a.StackID = id
		}
		s.Allocs = append(s.Allocs, a)
	}
	return s
}

// entry is one expected get_malloc_leak_info entry, written as Android's
// tests write their InfoEntry: size already carries the zygote bit.
type entry struct {
	size, num uint64
	frames    []uint64
}

func infoBuf(btSize int, entries []entry) []byte {
	if len(entries) == 0 {
		return nil
	}
	n := 16 + 8*btSize
	buf := make([]byte, n*len(entries))
	for i, e := range entries {
		binary.LittleEndian.PutUint64(buf[i*n:], e.size)
		binary.LittleEndian.PutUint64(buf[i*n+8:], e.num)
		for j, pc := range e.frames {
			binary.LittleEndian.PutUint64(buf[i*n+16+8*j:], pc)
		}
	}
	return buf
}

func seq(from uint64, n int) []uint64 {
	var s []uint64
	for i := range n {
		s = append(s, from+uint64(i))
	}
	return s
}

// TestLeakInfoAndroid ports the get_malloc_leak_info expectations of
// Android's malloc_debug_unit_tests.cpp.
func TestLeakInfoAndroid(t *testing.T) {
	tests := []struct {
		name    string
		btSize  int
		fakes   []fake
		entries []entry
		total   uint64
	}{
		{
			name:   "get_malloc_leak_info_empty",
			btSize: 16,
		},
		{
			// backtrace_enable_on_signal: an allocation made while
			// backtracing was off is not reported.
			name:   "backtrace_enable_on_signal_off",
			btSize: 20,
			fakes:  []fake{{size: 10, noBT: true}},
		},
		{
			// backtrace_enable_on_signal: after the enabling signal.
			name:    "backtrace_enable_on_signal_on",
			btSize:  20,
			fakes:   []fake{{size: 100, frames: []uint64{0xbc000, 0xecd00, 0x12000}}},
			entries: []entry{{100, 1, []uint64{0xbc000, 0xecd00, 0x12000}}},
			total:   100,
		},
		{
			name:    "get_malloc_leak_info_single",
			btSize:  16,
			fakes:   []fake{{size: 200, frames: []uint64{0xf, 0xe, 0xd}}},
			entries: []entry{{200, 1, []uint64{0xf, 0xe, 0xd}}},
			total:   200,
		},
		{
			// The 17-frame backtrace is cut to backtrace=16.
			name:   "get_malloc_leak_info_multi",
			btSize: 16,
			fakes: []fake{
				{size: 500, frames: []uint64{0xf, 0xe, 0xd, 0xc}},
				{size: 4100, frames: append(seq(0xbc000, 16), 0xffff)},
				{size: 9000, frames: []uint64{0x104}},
			},
			entries: []entry{
				{9000, 1, []uint64{0x104}},
				{4100, 1, seq(0xbc000, 16)},
				{500, 1, []uint64{0xf, 0xe, 0xd, 0xc}},
			},
			total: 500 + 4100 + 9000,
		},
		{
			name:   "backtrace_same_stack",
			btSize: 4,
			fakes: []fake{
				{size: 10, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 10, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 10, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 100, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
			},
			entries: []entry{
				{100, 1, []uint64{0xbc000, 0xecd00, 0x12000}},
				{10, 3, []uint64{0xbc000, 0xecd00, 0x12000}},
			},
			total: 130,
		},
		{
			name:   "backtrace_same_stack_zygote",
			btSize: 4,
			fakes: []fake{
				{size: 100, zygote: true, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 100, zygote: true, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 100, zygote: true, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 100, zygote: true, frames: []uint64{0xbc000}},
			},
			entries: []entry{
				{0x80000064, 3, []uint64{0xbc000, 0xecd00, 0x12000}},
				{0x80000064, 1, []uint64{0xbc000}},
			},
			total: 400,
		},
		{
			name:   "backtrace_same_stack_mix_zygote",
			btSize: 4,
			fakes: []fake{
				{size: 40, zygote: true, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 40, zygote: true, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 40, frames: []uint64{0xbc000, 0xecd00, 0x12000}},
				{size: 100, frames: []uint64{0xbc000}},
			},
			entries: []entry{
				{100, 1, []uint64{0xbc000}},
				{40, 1, []uint64{0xbc000, 0xecd00, 0x12000}},
				{0x80000028, 2, []uint64{0xbc000, 0xecd00, 0x12000}},
			},
			total: 220,
		},
		{
			// Backtracing was on but found no frame: the allocations are
			// reported, merged, with zero frames.
			name:    "backtrace_frame_data_nullptr_same_size",
			btSize:  4,
			fakes:   []fake{{size: 100}, {size: 100}, {size: 100}, {size: 100}},
			entries: []entry{{100, 4, nil}},
			total:   400,
		},
		{
			// zygote_set: bit 31 of the size marks a zygote child.
			name:    "zygote_set",
			btSize:  16,
			fakes:   []fake{{size: 300, zygote: true, frames: []uint64{0x1}}},
			entries: []entry{{300 | 1<<31, 1, []uint64{0x1}}},
			total:   300,
		},
	}
	for _, tt := range tests {
		for _, v := range variants {
			t.Run(tt.name+"/"+v.name, func(t *testing.T) {
				s := build(v, tt.btSize, tt.fakes)
				buf, overall, infoSize, total, btSize := s.LeakInfo()
				want := infoBuf(tt.btSize, tt.entries)
				if len(tt.entries) == 0 {
					if buf != nil || overall != 0 || infoSize != 0 || total != 0 || btSize != 0 {
						t.Fatalf("LeakInfo() = %x, %d, %d, %d, %d; want all zero", buf, overall, infoSize, total, btSize)
					}
					return
				}
				wantInfo := uint64(16 + 8*tt.btSize)
				if infoSize != wantInfo {
					t.Errorf("infoSize = %d, want %d", infoSize, wantInfo)
				}
				if overall != wantInfo*uint64(len(tt.entries)) {
					t.Errorf("overall = %d, want %d", overall, wantInfo*uint64(len(tt.entries)))
				}
				if total != tt.total {
					t.Errorf("total = %d, want %d", total, tt.total)
				}
				if btSize != uint64(tt.btSize) {
					t.Errorf("btSize = %d, want %d", btSize, tt.btSize)
				}
				if !slices.Equal(buf, want) {
					t.Errorf("buffer differs:\n got %x\nwant %x", buf, want)
				}
			})
		}
	}
}

// rec is a Record without its stack id, which depends on the variant.
type rec struct {
	zygote    bool
	size, num uint64
	frames    []uint64
}

func recsOf(rs []Record) []rec {
	var out []rec
	for _, r := range rs {
		out = append(out, rec{r.Zygote, r.Size, r.Num, r.Frames})
	}
	return out
}

func equalRecs(a, b []rec) bool {
	return slices.EqualFunc(a, b, func(x, y rec) bool {
		return x.zygote == y.zygote && x.size == y.size && x.num == y.num && slices.Equal(x.frames, y.frames)
	})
}

// TestUniqueListHeapDump ports the heap dump record lists of Android's
// BacktraceDumpOnSignal, backtrace_dump_on_exit and
// backtrace_dump_on_exit_shared_backtrace tests.
func TestUniqueListHeapDump(t *testing.T) {
	tests := []struct {
		name  string
		fakes []fake
		want  []rec
		total uint64
	}{
		{
			name: "BacktraceDumpOnSignal",
			fakes: []fake{
				{size: 100, zygote: true, frames: []uint64{0x100, 0x200}},
				{size: 40, zygote: true, frames: []uint64{0x300, 0x400}},
				{size: 200, zygote: true, frames: []uint64{0x500, 0x600}},
				{size: 10, frames: []uint64{0xa000, 0xb000}},
				{size: 50, frames: []uint64{0xa100, 0xb200}},
				{size: 5, frames: []uint64{0xa300, 0xb300}},
			},
			want: []rec{
				{false, 50, 1, []uint64{0xa100, 0xb200}},
				{false, 10, 1, []uint64{0xa000, 0xb000}},
				{false, 5, 1, []uint64{0xa300, 0xb300}},
				{true, 200, 1, []uint64{0x500, 0x600}},
				{true, 100, 1, []uint64{0x100, 0x200}},
				{true, 40, 1, []uint64{0x300, 0x400}},
			},
			total: 405,
		},
		{
			name: "backtrace_dump_on_exit",
			fakes: []fake{
				{size: 300, frames: []uint64{0x100, 0x200}},
				{size: 400, frames: []uint64{0xa000, 0xb000}},
				{size: 500, frames: []uint64{0xa000, 0xb000, 0xc000}},
			},
			want: []rec{
				{false, 500, 1, []uint64{0xa000, 0xb000, 0xc000}},
				{false, 400, 1, []uint64{0xa000, 0xb000}},
				{false, 300, 1, []uint64{0x100, 0x200}},
			},
			total: 1200,
		},
		{
			name: "backtrace_dump_on_exit_shared_backtrace",
			fakes: []fake{
				{size: 300, frames: []uint64{0x100, 0x200}},
				{size: 400, frames: []uint64{0xa000, 0xb000, 0xc000}},
				{size: 300, frames: []uint64{0x100, 0x200}},
			},
			want: []rec{
				{false, 400, 1, []uint64{0xa000, 0xb000, 0xc000}},
				{false, 300, 2, []uint64{0x100, 0x200}},
			},
			total: 1000,
		},
		{
			// A heap dump keeps allocations made with backtracing off
			// (StackID 0); they and those whose backtrace came out empty
			// all have "no backtrace" and merge.
			name: "no backtrace kept and merged",
			fakes: []fake{
				{size: 100, noBT: true},
				{size: 100},
				{size: 100, noBT: true},
				{size: 100, frames: []uint64{0x1}},
			},
			want: []rec{
				{false, 100, 1, []uint64{0x1}},
				{false, 100, 3, nil},
			},
			total: 400,
		},
	}
	for _, tt := range tests {
		for _, v := range variants {
			t.Run(tt.name+"/"+v.name, func(t *testing.T) {
				s := build(v, 4, tt.fakes)
				got := s.UniqueList(false)
				if !equalRecs(recsOf(got), tt.want) {
					t.Errorf("UniqueList(false) =\n%+v\nwant\n%+v", recsOf(got), tt.want)
				}
				if tot := TotalMemory(got); tot != tt.total {
					t.Errorf("TotalMemory = %d, want %d", tot, tt.total)
				}
			})
		}
	}
}

// TestUniqueListAdjacentOnly documents Android's quirk: only adjacent
// entries of the sorted list merge, so two allocations with the same size
// and backtrace stay apart when another backtrace of the same length sorts
// between them by pointer.
func TestUniqueListAdjacentOnly(t *testing.T) {
	a := []uint64{0xa000, 0xb000}
	b := []uint64{0xc000, 0xd000}
	tests := []struct {
		name   string
		allocs []Alloc
		want   []rec
	}{
		{
			name: "interleaved",
			allocs: []Alloc{
				{Ptr: 0x1000, Size: 10, StackID: 1},
				{Ptr: 0x2000, Size: 10, StackID: 2},
				{Ptr: 0x3000, Size: 10, StackID: 3},
			},
			want: []rec{{false, 10, 1, a}, {false, 10, 1, b}, {false, 10, 1, a}},
		},
		{
			name: "adjacent",
			allocs: []Alloc{
				{Ptr: 0x1000, Size: 10, StackID: 1},
				{Ptr: 0x2000, Size: 10, StackID: 3},
				{Ptr: 0x3000, Size: 10, StackID: 2},
			},
			want: []rec{{false, 10, 2, a}, {false, 10, 1, b}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Snapshot{
				Allocs:        tt.allocs,
				Stacks:        map[uint64][]uint64{1: a, 2: b, 3: slices.Clone(a)},
				BacktraceSize: 4,
			}
			got := s.UniqueList(false)
			if !equalRecs(recsOf(got), tt.want) {
				t.Errorf("UniqueList(false) =\n%+v\nwant\n%+v", recsOf(got), tt.want)
			}
			if got[0].StackID != 1 {
				t.Errorf("first record has StackID %d, want 1 (the first allocation's)", got[0].StackID)
			}
		})
	}
}

func TestUniqueListOnlyWithBacktrace(t *testing.T) {
	s := &Snapshot{
		Allocs: []Alloc{
			{Ptr: 0x1000, Size: 100},             // backtracing off
			{Ptr: 0x2000, Size: 100, StackID: 5}, // tried, no frame
			{Ptr: 0x3000, Size: 100, StackID: 6}, // tried, no frame, not in Stacks
		},
		Stacks:        map[uint64][]uint64{5: {}},
		BacktraceSize: 4,
	}
	got := s.UniqueList(true)
	want := []Record{{Size: 100, Num: 2, StackID: 5}}
	if len(got) != 1 || got[0].Size != want[0].Size || got[0].Num != want[0].Num ||
		got[0].StackID != want[0].StackID || got[0].Frames != nil {
		t.Errorf("UniqueList(true) = %+v, want %+v", got, want)
	}
	if all := s.UniqueList(false); len(all) != 1 || all[0].Num != 3 || all[0].StackID != 0 {
		t.Errorf("UniqueList(false) = %+v, want one record of 3 with StackID 0", all)
	}
}

// TestUniqueListTruncated checks that frames beyond BacktraceSize do not
// count: Android would have captured identical backtraces.
func TestUniqueListTruncated(t *testing.T) {
	s := &Snapshot{
		Allocs: []Alloc{
			{Ptr: 0x1000, Size: 8, StackID: 1},
			{Ptr: 0x2000, Size: 8, StackID: 2},
		},
		Stacks:        map[uint64][]uint64{1: {1, 2, 3}, 2: {1, 2, 4}},
		BacktraceSize: 2,
	}
	got := s.UniqueList(false)
	if len(got) != 1 || got[0].Num != 2 || !slices.Equal(got[0].Frames, []uint64{1, 2}) {
		t.Errorf("UniqueList(false) = %+v, want one record of 2 with frames [1 2]", got)
	}
}

func TestSortList(t *testing.T) {
	allocs := []Alloc{
		{Ptr: 0x9000, Size: 10},               // no backtrace
		{Ptr: 0x8000, Size: 10, StackID: 9},   // empty backtrace
		{Ptr: 0x7000, Size: 10, StackID: 1},   // 1 frame
		{Ptr: 0x6000, Size: 10, StackID: 2},   // 2 frames
		{Ptr: 0x5000, Size: 10, StackID: 1},   // 1 frame
		{Ptr: 0x4000, Size: 20},               // larger
		{Ptr: 0x3000, Size: 30, Zygote: true}, // zygote, larger still
		{Ptr: 0x2000, Size: 5, Zygote: true, StackID: 2},
		{Ptr: 0x1000, Size: 10}, // no backtrace, lower pointer
	}
	s := &Snapshot{
		Allocs:        slices.Clone(allocs),
		Stacks:        map[uint64][]uint64{1: {0x1}, 2: {0x1, 0x2}, 9: nil},
		BacktraceSize: 4,
	}
	got := s.SortList()
	var ptrs []uint64
	for _, a := range got {
		ptrs = append(ptrs, a.Ptr)
	}
	want := []uint64{0x4000, 0x6000, 0x5000, 0x7000, 0x1000, 0x8000, 0x9000, 0x3000, 0x2000}
	if !slices.Equal(ptrs, want) {
		t.Errorf("SortList order = %x, want %x", ptrs, want)
	}
	if !slices.Equal(s.Allocs, allocs) {
		t.Errorf("SortList changed s.Allocs")
	}
}

func TestTotalMemory(t *testing.T) {
	if got := TotalMemory(nil); got != 0 {
		t.Errorf("TotalMemory(nil) = %d", got)
	}
	recs := []Record{{Size: 300, Num: 2}, {Size: 400, Num: 1}}
	if got := TotalMemory(recs); got != 1000 {
		t.Errorf("TotalMemory = %d, want 1000", got)
	}
}
