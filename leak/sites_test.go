package leak

import (
	"reflect"
	"testing"
)

func TestSites(t *testing.T) {
	s := &Snapshot{
		Stacks: map[uint64][]uint64{7: {0x10, 0x20}, 9: {0x30}, 11: {0x40}},
		Allocs: []Alloc{
			{Ptr: 1, Size: 100, StackID: 7},
			{Ptr: 2, Size: 50, StackID: 9},
			{Ptr: 3, Size: 100, StackID: 7},
			{Ptr: 4, Size: 30, StackID: 0},
			{Ptr: 5, Size: 20, StackID: 0},
			{Ptr: 6, Size: 25, StackID: 9},
			{Ptr: 7, Size: 50, StackID: 11},
			{Ptr: 8, Size: 25, StackID: 11},
		},
	}
	sites, total := s.Sites()
	want := []Site{
		{StackID: 7, Frames: []uint64{0x10, 0x20}, Bytes: 200, Blocks: 2},
		// 75 bytes each: the lower stack id first.
		{StackID: 9, Frames: []uint64{0x30}, Bytes: 75, Blocks: 2},
		{StackID: 11, Frames: []uint64{0x40}, Bytes: 75, Blocks: 2},
		{StackID: 0, Frames: nil, Bytes: 50, Blocks: 2},
	}
	if !reflect.DeepEqual(sites, want) {
		t.Errorf("sites:\n%+v\nwant:\n%+v", sites, want)
	}
	if !reflect.DeepEqual(total, Site{Bytes: 400, Blocks: 8}) {
		t.Errorf("total %+v", total)
	}
	if sites, total := (&Snapshot{}).Sites(); len(sites) != 0 || !reflect.DeepEqual(total, Site{}) {
		t.Errorf("empty snapshot: %v %v", sites, total)
	}
}
