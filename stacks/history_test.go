package stacks

import (
	"os"
	"testing"
)

func TestMapsHistory(t *testing.T) {
	var h MapsHistory
	first, err := ParseMaps([]byte("1000-2000 r-xp 00000000 08:01 11 /lib/a.so\n3000-4000 rw-p 00000000 00:00 0 [heap]\n"))
	if err != nil {
		t.Fatal(err)
	}
	second, _ := ParseMaps([]byte("1000-2000 r-xp 00000000 08:01 11 /lib/a.so\n5000-6000 r-xp 00000000 08:01 12 /lib/b.so\n"))
	third, _ := ParseMaps([]byte("1000-2000 r-xp 00000000 08:01 13 /lib/c.so\n"))
	if added := h.Add(first); len(added) != 1 || added[0].Path != "/lib/a.so" {
		t.Errorf("first snapshot added %v", added)
	}
	if added := h.Add(second); len(added) != 1 || added[0].Path != "/lib/b.so" {
		t.Errorf("second snapshot added %v", added)
	}
	h.Add(third)
	for _, tc := range []struct {
		pc   uint64
		want string
	}{{0x1800, "/lib/c.so"}, {0x5000, "/lib/b.so"}, {0x3800, ""}, {0x6000, ""}} {
		m := h.Find(tc.pc)
		got := ""
		if m != nil {
			got = m.Path
		}
		if got != tc.want {
			t.Errorf("Find(%#x) = %q, want %q", tc.pc, got, tc.want)
		}
	}
}

func TestAddLibraryOncePerBase(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var h MapsHistory
	first, err := h.AddLibrary(exe, 0x10000000)
	if err != nil || len(first) == 0 {
		t.Fatalf("AddLibrary: %v %v", first, err)
	}
	if again, err := h.AddLibrary(exe, 0x10000000); err != nil || len(again) != 0 {
		t.Errorf("the same library at the same base added %v, %v", again, err)
	}
	if m := h.Find(first[0].Start); m == nil || m.Path != exe {
		t.Errorf("Find(%#x) = %v", first[0].Start, m)
	}
	h.Reset()
	if m := h.Find(first[0].Start); m != nil {
		t.Errorf("Find after Reset = %v", m)
	}
}
