package unreach

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mdtrace/mdtrace/stacks"
)

func TestClassify(t *testing.T) {
	maps, err := stacks.ParseMaps([]byte(`555555554000-555555555000 r--p 00000000 fd:01 10 /usr/bin/prog
555555555000-555555556000 r-xp 00001000 fd:01 10 /usr/bin/prog
555555556000-555555557000 r--p 00002000 fd:01 10 /usr/bin/prog
555555557000-555555558000 rw-p 00003000 fd:01 10 /usr/bin/prog
555555558000-555555559000 rw-p 00000000 00:00 0 
555555559000-55555557a000 rw-p 00000000 00:00 0                          [heap]
7ffff0000000-7ffff0021000 rw-p 00000000 00:00 0 
7ffff0021000-7ffff4000000 ---p 00000000 00:00 0 
7ffff7000000-7ffff7100000 rw-p 00000000 00:00 0 
7ffff7200000-7ffff7201000 ---p 00000000 00:00 0 
7ffff7201000-7ffff7a01000 rw-p 00000000 00:00 0 
7ffff7b00000-7ffff7b10000 rw-p 00000000 00:00 0 
7ffff7c00000-7ffff7c01000 rw-p 00000000 00:00 0 
7ffff7d00000-7ffff7d01000 rw-p 00000000 00:00 0 
7ffff7e00000-7ffff7e01000 rw-p 00010000 fd:01 20 /usr/lib/libmdshim.so
7ffff7f00000-7ffff7f01000 rw-s 00000000 00:05 30 /dev/dri/card0
7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0                          [vvar]
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
`))
	if err != nil {
		t.Fatal(err)
	}
	blocks := []Block{
		{Ptr: 0x5555555592a0, Size: 24},     // [heap]
		{Ptr: 0x5555555592c0, Size: 40},     // [heap], same run
		{Ptr: 0x555555579000, Size: 100},    // [heap], a run of its own
		{Ptr: 0x7ffff00008d0, Size: 64},     // another arena's heap
		{Ptr: 0x7ffff7b00010, Size: 0x8000}, // mmapped by glibc
		{Ptr: 0x600000000000, Size: 8},      // nowhere
	}
	sps := []uint64{0x7fffffffe000, 0x7ffff7a00000}
	l := Classify(maps.Mappings, sps, blocks, Known{
		Addrs: []uint64{0x7ffff7c00800},
		File:  func(p string) bool { return strings.HasSuffix(p, "/libmdshim.so") },
	})
	show := func(rs []Range) string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%x-%x", r.Start, r.End))
		}
		return strings.Join(s, " ")
	}
	// The program's .data, its .bss, the anonymous mapping of 1 MiB,
	// what the mmapped block leaves of its mapping (merged with the next
	// one), the one no thread is on (7ffff7d00000).
	if got, want := show(l.Globals), "555555557000-555555558000 555555558000-555555559000 7ffff7000000-7ffff7100000 7ffff7b09000-7ffff7b10000 7ffff7d00000-7ffff7d01000"; got != want {
		t.Errorf("globals %s, want %s", got, want)
	}
	if got, want := show(l.Stacks), "7fffffffdf80-7ffffffff000 7ffff79fff80-7ffff7a01000"; got != want {
		t.Errorf("stacks %s, want %s", got, want)
	}
	if got, want := show(l.Runs), "555555559290-5555555592e8 555555578ff0-555555579064 7ffff00008c0-7ffff0000910 7ffff7b00000-7ffff7b08010"; got != want {
		t.Errorf("runs %s, want %s", got, want)
	}
	if l.Outside != 1 {
		t.Errorf("%d blocks outside, want 1", l.Outside)
	}
}

// TestClassifyKnown: the ranges the allocator mapped for itself are not
// roots; in a process attached to late, the heap outside the blocks
// mdtrace knows, byte for byte, is.
func TestClassifyKnown(t *testing.T) {
	maps, err := stacks.ParseMaps([]byte(`555555557000-555555558000 rw-p 00003000 fd:01 10 /usr/bin/prog
555555559000-55555557a000 rw-p 00000000 00:00 0                          [heap]
7ffff0000000-7ffff0021000 rw-p 00000000 00:00 0 
7ffff0021000-7ffff4000000 ---p 00000000 00:00 0 
7ffff7000000-7ffff7100000 rw-p 00000000 00:00 0 
7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]
`))
	if err != nil {
		t.Fatal(err)
	}
	blocks := []Block{
		{Ptr: 0x5555555592a0, Size: 24},  // [heap]
		{Ptr: 0x7ffff00008d0, Size: 64},  // another arena's heap
		{Ptr: 0x7ffff7040010, Size: 100}, // another allocator's extent
	}
	sps := []uint64{0x7fffffffe000}
	show := func(rs []Range) string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%x-%x", r.Start, r.End))
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		name  string
		known Known
		want  string
	}{
		{"nothing known", Known{},
			"555555557000-555555558000 7ffff7000000-7ffff7040000 7ffff7041000-7ffff7100000"},
		{"the allocator's own mappings", Known{Allocator: []Range{{0x7ffff7000000, 0x7ffff7020000}, {0x7ffff7080000, 0x7ffff7090000}}},
			"555555557000-555555558000 7ffff7020000-7ffff7040000 7ffff7041000-7ffff7080000 7ffff7090000-7ffff7100000"},
		{"late", Known{Late: true},
			"555555557000-555555558000 555555559000-5555555592a0 5555555592b8-55555557a000 7ffff0000000-7ffff00008d0 7ffff0000910-7ffff0021000 7ffff7000000-7ffff7040010 7ffff7040074-7ffff7100000"},
		{"late, with the allocator's own mappings", Known{Late: true, Allocator: []Range{{0x7ffff7040000, 0x7ffff7100000}}},
			"555555557000-555555558000 555555559000-5555555592a0 5555555592b8-55555557a000 7ffff0000000-7ffff00008d0 7ffff0000910-7ffff0021000 7ffff7000000-7ffff7040000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Classify(maps.Mappings, sps, blocks, tc.known)
			if got := show(l.Globals); got != tc.want {
				t.Errorf("globals %s, want %s", got, tc.want)
			}
			if got, want := show(l.Stacks), "7fffffffdf80-7ffffffff000"; got != want {
				t.Errorf("stacks %s, want %s", got, want)
			}
		})
	}
}
