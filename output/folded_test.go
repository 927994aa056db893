package output

import (
	"bytes"
	"testing"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

func TestWriteFolded(t *testing.T) {
	snap := &leak.Snapshot{
		Allocs: []leak.Alloc{
			{Ptr: 1, Size: 100, StackID: 2},
			{Ptr: 2, Size: 50, StackID: 2},
			{Ptr: 3, Size: 300, StackID: 4},
			{Ptr: 4, Size: 7},
			// The same frames, cut at the frame limit: never merged
			// with the complete stack.
			{Ptr: 5, Size: 20, StackID: 2 | abi.StackIDTruncated},
		},
		Stacks:        map[uint64][]uint64{2: {0x10, 0x20}, 4: {0x30, 0x20}, 2 | abi.StackIDTruncated: {0x10, 0x20}},
		BacktraceSize: 16,
	}
	frames := func(pcs []uint64) []stacks.Frame {
		var out []stacks.Frame
		for _, pc := range pcs {
			switch pc {
			case 0x10:
				out = append(out, stacks.Frame{PC: pc, RelPC: pc, MapName: "/bin/app", Func: "_ZN3geo5ArenaIcE3rawEm"})
			case 0x20:
				out = append(out, stacks.Frame{PC: pc, RelPC: pc, MapName: "/bin/app", Func: "main"})
			default:
				out = append(out, stacks.Frame{PC: pc, RelPC: 0x1230, MapName: "/lib/libx.so"})
			}
		}
		return out
	}
	line := func(pc uint64) (string, int, bool) {
		if pc == 0x20 {
			return "/src/app.cc", 42, true
		}
		return "", 0, false
	}
	var b bytes.Buffer
	if err := WriteFolded(&b, snap, frames, line); err != nil {
		t.Fatal(err)
	}
	want := "main (app.cc:42);libx.so+0x1230 300\n" +
		"main (app.cc:42);geo::Arena<char>::raw(unsigned long) 150\n" +
		"[truncated];main (app.cc:42);geo::Arena<char>::raw(unsigned long) 20\n" +
		"[no backtrace] 7\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
