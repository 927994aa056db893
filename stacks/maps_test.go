package stacks

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// trickyMaps has the kinds of line /proc/PID/maps prints: split r--/r-x
// mappings of one file, a path with spaces, deleted files, anonymous
// memory with and without the trailing blank of older kernels, pseudo-paths
// and a three-digit device major.
const trickyMaps = `55d4a2a00000-55d4a2a02000 r--p 00000000 fd:01 1835020                    /usr/bin/prog
55d4a2a02000-55d4a2a05000 r-xp 00002000 fd:01 1835020                    /usr/bin/prog
55d4a2a05000-55d4a2a06000 rw-p 00005000 fd:01 1835021                    /opt/old lib/libold.so (deleted)
55d4a3c1e000-55d4a3c3f000 rw-p 00000000 00:00 0                          [heap]
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7f1e2c021000-7f1e30000000 ---p 00000000 00:00 0
7f1e30000000-7f1e30001000 r-xs 00000000 00:01 2057                       memfd:foo (deleted)
7f1e30001000-7f1e30002000 rw-p 00000000 00:00 0                          [anon:my region]
7f1e30002000-7f1e30003000 r-xp 00001000 103:02 77                        /tmp/dir with  two spaces/lib x.so
7ffd1c8e5000-7ffd1c906000 rw-p 00000000 00:00 0                          [stack]
7ffd1c9b6000-7ffd1c9ba000 r--p 00000000 00:00 0                          [vvar]
7ffd1c9ba000-7ffd1c9bc000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestParseMaps(t *testing.T) {
	m, err := ParseMaps([]byte(trickyMaps))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{0x55d4a2a00000, 0x55d4a2a02000, "r--p", 0, "fd:01", 1835020, "/usr/bin/prog"},
		{0x55d4a2a02000, 0x55d4a2a05000, "r-xp", 0x2000, "fd:01", 1835020, "/usr/bin/prog"},
		{0x55d4a2a05000, 0x55d4a2a06000, "rw-p", 0x5000, "fd:01", 1835021, "/opt/old lib/libold.so (deleted)"},
		{0x55d4a3c1e000, 0x55d4a3c3f000, "rw-p", 0, "00:00", 0, "[heap]"},
		{0x7f1e2c000000, 0x7f1e2c021000, "rw-p", 0, "00:00", 0, ""},
		{0x7f1e2c021000, 0x7f1e30000000, "---p", 0, "00:00", 0, ""},
		{0x7f1e30000000, 0x7f1e30001000, "r-xs", 0, "00:01", 2057, "memfd:foo (deleted)"},
		{0x7f1e30001000, 0x7f1e30002000, "rw-p", 0, "00:00", 0, "[anon:my region]"},
		{0x7f1e30002000, 0x7f1e30003000, "r-xp", 0x1000, "103:02", 77, "/tmp/dir with  two spaces/lib x.so"},
		{0x7ffd1c8e5000, 0x7ffd1c906000, "rw-p", 0, "00:00", 0, "[stack]"},
		{0x7ffd1c9b6000, 0x7ffd1c9ba000, "r--p", 0, "00:00", 0, "[vvar]"},
		{0x7ffd1c9ba000, 0x7ffd1c9bc000, "r-xp", 0, "00:00", 0, "[vdso]"},
		{0xffffffffff600000, 0xffffffffff601000, "--xp", 0, "00:00", 0, "[vsyscall]"},
	}
	if !reflect.DeepEqual(m.Mappings, want) {
		for i := range max(len(m.Mappings), len(want)) {
			var got, exp Mapping
			if i < len(m.Mappings) {
				got = m.Mappings[i]
			}
			if i < len(want) {
				exp = want[i]
			}
			if got != exp {
				t.Errorf("mapping %d:\n got %+v\nwant %+v", i, got, exp)
			}
		}
	}
	if string(m.Raw) != trickyMaps {
		t.Errorf("Raw is not the verbatim input")
	}
	if got := m.Mappings[2].Name(); got != "/opt/old lib/libold.so" {
		t.Errorf("Name() = %q", got)
	}
	if !m.Mappings[6].Deleted() || m.Mappings[6].Name() != "memfd:foo" || m.Mappings[1].Deleted() {
		t.Errorf("Deleted/Name wrong for %+v", m.Mappings[6])
	}
}

func TestParseMapsEmptyAndBlank(t *testing.T) {
	for _, in := range []string{"", "\n", "\n\n  \n"} {
		m, err := ParseMaps([]byte(in))
		if err != nil || len(m.Mappings) != 0 || string(m.Raw) != in {
			t.Errorf("ParseMaps(%q) = %+v, %v", in, m, err)
		}
	}
	// No final newline, blank lines in between.
	m, err := ParseMaps([]byte("10-20 r-xp 0 00:00 0\n\n30-40 r--p 10 08:01 5 /x"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Mappings) != 2 || m.Mappings[1].Path != "/x" || m.Mappings[1].Offset != 0x10 {
		t.Errorf("got %+v", m.Mappings)
	}
}

func TestFind(t *testing.T) {
	m, err := ParseMaps([]byte(trickyMaps))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pc   uint64
		want int // index in m.Mappings, -1 for none
	}{
		{0, -1},
		{0x55d4a29fffff, -1},
		{0x55d4a2a00000, 0},
		{0x55d4a2a01fff, 0},
		{0x55d4a2a02000, 1}, // End is exclusive: the next mapping starts here
		{0x55d4a2a05fff, 2},
		{0x55d4a2a06000, -1}, // a gap
		{0x55d4a3c1dfff, -1},
		{0x55d4a3c1e000, 3},
		{0x7f1e2fffffff, 5},
		{0x7ffd1c9bbfff, 11},
		{0x7ffd1c9bc000, -1},
		{0xffffffffff600000, 12},
		{0xffffffffff600fff, 12},
		{0xffffffffff601000, -1},
		{^uint64(0), -1},
	} {
		got := m.Find(tc.pc)
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("Find(%#x) = %+v, want nil", tc.pc, *got)
		case tc.want >= 0 && got != &m.Mappings[tc.want]:
			t.Errorf("Find(%#x) = %v, want mapping %d", tc.pc, got, tc.want)
		}
	}
	var nilMaps *Maps
	if nilMaps.Find(1) != nil {
		t.Error("Find on nil Maps")
	}
	empty, _ := ParseMaps(nil)
	if empty.Find(1) != nil {
		t.Error("Find on empty Maps")
	}
}

func TestParseMapsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"zz-10 r-xp 0 00:00 0", `maps line 1: bad address range "zz-10"`},
		{"10 r-xp 0 00:00 0", `maps line 1: bad address range "10"`},
		{"0x10-0x20 r-xp 0 00:00 0", `maps line 1: bad address range "0x10-0x20"`},
		{"10-20-30 r-xp 0 00:00 0", `maps line 1: bad address range "10-20-30"`},
		{"10-10000000000000000 r-xp 0 00:00 0", `maps line 1: bad address range "10-10000000000000000"`},
		{"20-10 r-xp 0 00:00 0", `maps line 1: empty address range "20-10"`},
		{"20-20 r-xp 0 00:00 0", `maps line 1: empty address range "20-20"`},
		{"10-20 rwxq 0 00:00 0", `maps line 1: bad permissions "rwxq"`},
		{"10-20 r-x 0 00:00 0", `maps line 1: bad permissions "r-x"`},
		{"10-20 r-xp zz 00:00 0", `maps line 1: bad offset "zz"`},
		{"10-20 r-xp -1 00:00 0", `maps line 1: bad offset "-1"`},
		{"10-20 r-xp 0 0000 0", `maps line 1: bad device "0000"`},
		{"10-20 r-xp 0 00:0g 0", `maps line 1: bad device "00:0g"`},
		{"10-20 r-xp 0 :00 0", `maps line 1: bad device ":00"`},
		{"10-20 r-xp 0 00:00 -1", `maps line 1: bad inode "-1"`},
		{"10-20 r-xp 0 00:00 1a /x", `maps line 1: bad inode "1a"`},
		{"10-20 r-xp 0 00:00", `maps line 1: want at least 5 fields, found 4`},
		{"10-20", `maps line 1: want at least 5 fields, found 1`},
		{"10-20 r-xp 0 00:00 0\n\nzz", `maps line 3: want at least 5 fields, found 1`},
		{"10-20 r-xp 0 00:00 0\n\n15-30 r-xp 0 00:00 0\n", `maps line 3: mapping at 0x15 overlaps or precedes the one before it (ending at 0x20)`},
		{"30-40 r-xp 0 00:00 0\n10-20 r-xp 0 00:00 0\n", `maps line 2: mapping at 0x10 overlaps or precedes the one before it (ending at 0x40)`},
	} {
		m, err := ParseMaps([]byte(tc.in))
		if err == nil {
			t.Errorf("ParseMaps(%q) = %+v, want error %q", tc.in, m.Mappings, tc.want)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("ParseMaps(%q) error\n got %q\nwant %q", tc.in, err, tc.want)
		}
	}
}

func TestReadMaps(t *testing.T) {
	m, err := ReadMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var pc uint64
	found := false
	for _, mp := range m.Mappings {
		if mp.Path == exe && strings.Contains(mp.Perms, "x") {
			found = true
			pc = mp.Start
		}
	}
	if !found {
		t.Fatalf("no executable mapping of %s in:\n%s", exe, m.Raw)
	}
	if got := m.Find(pc); got == nil || got.Path != exe {
		t.Errorf("Find(%#x) = %v", pc, got)
	}

	const noSuchPID = 1 << 30 // above the kernel's largest pid_max
	_, err = ReadMaps(noSuchPID)
	if err == nil || !strings.HasPrefix(err.Error(), "reading maps of process 1073741824: ") {
		t.Errorf("ReadMaps(%d) error = %v", noSuchPID, err)
	}
}
