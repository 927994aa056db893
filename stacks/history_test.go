package stacks

import (
	"debug/elf"
	"os"
	"slices"
	"testing"

	"github.com/mdtrace/mdtrace/internal/fixture"
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
	first, err := h.AddLibrary(exe, 0x10000000, "")
	if err != nil || len(first) == 0 {
		t.Fatalf("AddLibrary: %v %v", first, err)
	}
	if again, err := h.AddLibrary(exe, 0x10000000, ""); err != nil || len(again) != 0 {
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

// A library named as its process sees it is read where mdtrace reaches it
// (open), and keeps its name.
func TestAddLibraryOpensGivenFile(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const name = "/no/such/dir/libnamed.so"
	var h MapsHistory
	if _, err := h.AddLibrary(name, 0x20000000, ""); err == nil {
		t.Fatalf("AddLibrary of %s read at its name: no error", name)
	}
	var h2 MapsHistory
	got, err := h2.AddLibrary(name, 0x20000000, exe)
	if err != nil || len(got) == 0 {
		t.Fatalf("AddLibrary read at %s: %v %v", exe, got, err)
	}
	var h3 MapsHistory
	want, err := h3.AddLibrary(exe, 0x20000000, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("mappings %v, want those of %s: %v", got, exe, want)
	}
	for i := range got {
		if got[i].Path != name {
			t.Errorf("mapping %d is named %q, want %q", i, got[i].Path, name)
		}
		got[i].Path = exe
		if got[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The segments kept for a file are those of its contents: a file written
// again at the same path is read again.
func TestExecutableSegmentsFileReplaced(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/lib.so"
	for _, src := range []string{exe, "/bin/true", exe} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Skipf("no %s: %v", src, err)
		}
		fixture.ReplaceFile(t, path, data, 0o644)
		got, err := executableSegments(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := openELF(src, false)
		if err != nil {
			t.Fatal(err)
		}
		var want []Segment
		for _, s := range f.Loads {
			if s.Flags&elf.PF_X != 0 && s.MemSize != 0 {
				want = append(want, s)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("segments of %s copied to %s = %+v, want %+v", src, path, got, want)
		}
	}
}
