package output

import (
	"testing"

	"github.com/mdtrace/mdtrace/stacks"
)

func TestFormatFrame(t *testing.T) {
	tests := []struct {
		name     string
		i        int
		f        stacks.Frame
		want     string
		wantFull string
	}{
		{
			name:     "function",
			i:        1,
			f:        stacks.Frame{PC: 0x7f0000021438, RelPC: 0x21438, MapName: "/system/lib/libc.so", Func: "newlocale", FuncOff: 160},
			want:     "          #01  pc 0000000000021438  /system/lib/libc.so (newlocale+160)",
			wantFull: "          #1  pc 0000000000021438  /system/lib/libc.so (newlocale+160)",
		},
		{
			name:     "no function",
			i:        0,
			f:        stacks.Frame{PC: 0x7f0000029310, RelPC: 0x29310, MapName: "/system/lib/libc.so"},
			want:     "          #00  pc 0000000000029310  /system/lib/libc.so",
			wantFull: "          #0  pc 0000000000029310  /system/lib/libc.so",
		},
		{
			name:     "unknown map",
			i:        2,
			f:        stacks.Frame{PC: 0xdead, RelPC: 0xdead},
			want:     "          #02  pc 000000000000dead  <unknown>",
			wantFull: "          #2  pc 000000000000dead  <unknown>",
		},
		{
			name:     "function at offset 0",
			i:        3,
			f:        stacks.Frame{RelPC: 0xa000, MapName: "/data/fake.so", Func: "level1"},
			want:     "          #03  pc 000000000000a000  /data/fake.so (level1+0)",
			wantFull: "          #3  pc 000000000000a000  /data/fake.so (level1)",
		},
		{
			name:     "elf offset",
			i:        12,
			f:        stacks.Frame{RelPC: 0xa9e38, MapName: "/system/app/Foo.apk", ElfOffset: 0x5000, Func: "_ZN3foo3barEv", FuncOff: 12},
			want:     "          #12  pc 00000000000a9e38  /system/app/Foo.apk (offset 0x5000) (foo::bar()+12)",
			wantFull: "          #12  pc 00000000000a9e38  (offset 0x5000) /system/app/Foo.apk (foo::bar()+12)",
		},
		{
			name:     "elf offset without function",
			i:        100,
			f:        stacks.Frame{RelPC: 0xa28a8, MapName: "/system/app/Foo.apk", ElfOffset: 0x5000},
			want:     "          #100  pc 00000000000a28a8  /system/app/Foo.apk (offset 0x5000)",
			wantFull: "          #100  pc 00000000000a28a8  (offset 0x5000) /system/app/Foo.apk",
		},
		{
			name:     "full width pc",
			i:        0,
			f:        stacks.Frame{RelPC: 0xffffffffff600000, MapName: "[vsyscall]", Func: "f", FuncOff: 1},
			want:     "          #00  pc ffffffffff600000  [vsyscall] (f+1)",
			wantFull: "          #0  pc ffffffffff600000  [vsyscall] (f+1)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatFrame(tt.i, tt.f); got != tt.want {
				t.Errorf("FormatFrame =\n%q\nwant\n%q", got, tt.want)
			}
			if got := FormatFrameFull(tt.i, tt.f); got != tt.wantFull {
				t.Errorf("FormatFrameFull =\n%q\nwant\n%q", got, tt.wantFull)
			}
		})
	}
}

func TestFormatFrameDemangles(t *testing.T) {
	f := stacks.Frame{PC: 0x5000, RelPC: 0x1234, MapName: "/usr/lib/libgeo.so", Func: "_ZN3geo5ArenaIcE3rawEm", FuncOff: 12}
	if got, want := FormatFrame(3, f), "          #03  pc 0000000000001234  /usr/lib/libgeo.so (geo::Arena<char>::raw(unsigned long)+12)"; got != want {
		t.Errorf("FormatFrame:\n got %q\nwant %q", got, want)
	}
	if got, want := FormatFrameFull(3, f), "          #3  pc 0000000000001234  /usr/lib/libgeo.so (geo::Arena<char>::raw(unsigned long)+12)"; got != want {
		t.Errorf("FormatFrameFull:\n got %q\nwant %q", got, want)
	}
}
