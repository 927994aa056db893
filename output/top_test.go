package output

import (
	"strings"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

func TestWriteTopSites(t *testing.T) {
	names := map[uint64]stacks.Frame{
		0x1000: {PC: 0x1000, RelPC: 0x100, MapName: "/bin/prog", Func: "_Z4leakv"},
		0x2000: {PC: 0x2000, RelPC: 0x200, MapName: "/bin/prog", Func: "main"},
		0x3000: {PC: 0x3000, RelPC: 0x3f0, MapName: "/lib/libc.so.6"},
	}
	frames := func(pcs []uint64) []stacks.Frame {
		var out []stacks.Frame
		for _, pc := range pcs {
			out = append(out, names[pc])
		}
		return out
	}
	sites := []leak.Site{
		{StackID: 1, Frames: []uint64{0x1000, 0x2000, 0x3000, 0x2000, 0x1000}, Bytes: 123456789, Blocks: 12},
		{StackID: 2, Frames: []uint64{0x3000}, Bytes: 64, Blocks: 1},
		{StackID: 0, Bytes: 10, Blocks: 1},
		{StackID: 3, Frames: []uint64{0x2000}, Bytes: 1, Blocks: 1},
	}
	var b strings.Builder
	when := time.Date(2026, 11, 22, 16, 5, 9, 0, time.Local)
	if err := WriteTopSites(&b, 42, "./prog", when, sites, leak.Site{Bytes: 123456864, Blocks: 15}, 3, frames); err != nil {
		t.Fatal(err)
	}
	want := "mdtrace: process 42 (./prog) at 16:05:09: 15 live blocks, 123456864 bytes; top 3 of 4 allocation sites:\n" +
		"       BYTES     BLOCKS  SITE\n" +
		"   123456789         12  leak() <- main <- libc.so.6+0x3f0 <- main\n" +
		"          64          1  libc.so.6+0x3f0\n" +
		"          10          1  [no backtrace]\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestWriteLiveSitesEmpty: a process with no block live has its bottom
// line alone, not a heading over an empty list.
func TestWriteLiveSitesEmpty(t *testing.T) {
	for _, tc := range []struct {
		v    LiveSites
		want string
	}{
		{LiveSites{PID: 7, Prog: "/bin/true", Since: "since tracing began", N: 8},
			"mdtrace: process 7 (/bin/true): 0 bytes in 0 allocations live since tracing began\n"},
		{LiveSites{PID: 7, Prog: "true", Since: "at exit", N: 8, Suppressed: leak.Site{Bytes: 96, Blocks: 2}},
			"mdtrace: process 7 (true): 0 bytes in 0 allocations live at exit (2 suppressed, 96 bytes)\n"},
	} {
		var b strings.Builder
		if err := WriteLiveSites(&b, tc.v, nil); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("got:\n%s\nwant:\n%s", b.String(), tc.want)
		}
	}
}
