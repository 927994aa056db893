package output

import (
	"strconv"

	"github.com/mdtrace/mdtrace/stacks"
)

// unknownMap is what a backtrace line shows for a pc that no mapping holds.
const unknownMap = "<unknown>"

// FormatFrame returns backtrace line i for frame f as Android's malloc debug
// logs it without backtrace_full, without a trailing newline, for example
// "          #00  pc 0000000000001234  /system/lib64/libc.so (malloc+20)".
// It has ten spaces, "#" and the frame number in at least two digits, the
// map-relative pc in sixteen hex digits, the map name ("<unknown>" when no
// mapping holds the pc), " (offset 0x...)" when the ELF image starts at a
// non-zero file offset, and " (FUNC+OFFSET)" with a decimal offset when the
// function is known.
func FormatFrame(i int, f stacks.Frame) string {
	b := make([]byte, 0, 64+len(f.MapName)+len(f.Func))
	b = append(b, "          #"...)
	b = appendPad(b, strconv.AppendInt(nil, int64(i), 10), 2, '0')
	b = append(b, "  pc "...)
	b = appendPad(b, strconv.AppendUint(nil, f.RelPC, 16), 16, '0')
	b = append(b, "  "...)
	b = appendMapName(b, f.MapName)
	if f.ElfOffset != 0 {
		b = append(b, " (offset 0x"...)
		b = strconv.AppendUint(b, f.ElfOffset, 16)
		b = append(b, ')')
	}
	if f.Func != "" {
		b = append(b, " ("...)
		b = append(b, stacks.Demangle(f.Func)...)
		b = append(b, '+')
		b = strconv.AppendUint(b, f.FuncOff, 10)
		b = append(b, ')')
	}
	return string(b)
}

// FormatFrameFull returns backtrace line i for frame f as Android's malloc
// debug logs it with backtrace_full, without a trailing newline, for example
// "          #0  pc 0000000000001234  /system/lib64/libc.so (malloc+20)".
// Unlike FormatFrame, the frame number is not padded, " (offset 0x...)"
// comes before the map name as "(offset 0x...) ", and "+OFFSET" is left out
// when the pc is at the start of the function.
func FormatFrameFull(i int, f stacks.Frame) string {
	b := make([]byte, 0, 64+len(f.MapName)+len(f.Func))
	b = append(b, "          #"...)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, "  pc "...)
	b = appendPad(b, strconv.AppendUint(nil, f.RelPC, 16), 16, '0')
	b = append(b, "  "...)
	if f.ElfOffset != 0 {
		b = append(b, "(offset 0x"...)
		b = strconv.AppendUint(b, f.ElfOffset, 16)
		b = append(b, ") "...)
	}
	b = appendMapName(b, f.MapName)
	if f.Func != "" {
		b = append(b, " ("...)
		b = append(b, stacks.Demangle(f.Func)...)
		if f.FuncOff != 0 {
			b = append(b, '+')
			b = strconv.AppendUint(b, f.FuncOff, 10)
		}
		b = append(b, ')')
	}
	return string(b)
}

func appendMapName(b []byte, name string) []byte {
	if name == "" {
		return append(b, unknownMap...)
	}
	return append(b, name...)
}
