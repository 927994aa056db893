//go:build linux

package tracer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func abs(to uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{0xff, 0x25, 0, 0, 0, 0}, to)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestBypassCode: the bypasses of the prologues the probes go past, as
// glibc 2.36's malloc and free have them, and of those that cannot be
// copied.
func TestBypassCode(t *testing.T) {
	const at = 0x7f0000098ef0
	for _, c := range []struct {
		name string
		code []byte
		last int
		dst  uint64
		want []byte
		err  bool
	}{
		{
			// malloc: push %r12 at the entry, probed there.
			name: "push at the entry",
			code: []byte{0x41, 0x54, 0x55, 0x53},
			last: 0,
			want: cat([]byte{0x41, 0x54}, abs(at+2)),
		},
		{
			// free: test %rdi,%rdi; je +0xbf; push %rbp, probed at the push.
			name: "null test, near je, push",
			code: []byte{0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0, 0, 0, 0x55, 0x53},
			last: 9,
			want: cat([]byte{0x48, 0x85, 0xff, 0x75, 14}, abs(at+9+0xbf), []byte{0x55}, abs(at+10)),
		},
		{
			name: "short ja probed itself",
			code: []byte{0x48, 0x81, 0xff, 0, 0x10, 0, 0, 0x77, 0x10, 0x90},
			last: 7,
			want: cat([]byte{0x48, 0x81, 0xff, 0, 0x10, 0, 0}, []byte{0x76, 14}, abs(at+9+0x10), abs(at+9)),
		},
		{
			name: "jmp ends the bypass",
			code: []byte{0xeb, 0x05, 0x90},
			last: 0,
			want: abs(at + 2 + 5),
		},
		{
			name: "endbr64, then push",
			code: []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x90},
			last: 4,
			want: cat([]byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55}, abs(at+5)),
		},
		{
			// Its operand moved: at+7+0x04030201 from dst+7.
			name: "a RIP-relative load",
			code: []byte{0x48, 0x8b, 0x05, 1, 2, 3, 4, 0x55},
			last: 7,
			want: cat([]byte{0x48, 0x8b, 0x05, 0xf1, 0x90, 0x0c, 0x04, 0x55}, abs(at+8)),
		},
		{
			// glibc 2.36's memalign: cmpb $0,__malloc_initialized(%rip); je.
			name: "a RIP-relative compare, then je",
			code: []byte{0x80, 0x3d, 0x71, 0x0e, 0x14, 0x00, 0x00, 0x74, 0x07},
			last: 7,
			want: cat([]byte{0x80, 0x3d, 0x61, 0x9d, 0x1d, 0x00, 0x00, 0x75, 14}, abs(at+9+7), abs(at+9)),
		},
		{
			name: "a RIP-relative operand out of reach",
			code: []byte{0x48, 0x8b, 0x05, 1, 2, 3, 4, 0x55},
			last: 7,
			dst:  0x100000000000,
			err:  true,
		},
		{
			name: "an indirect call through a RIP-relative slot",
			code: []byte{0xff, 0x15, 1, 2, 3, 4, 0x55},
			last: 6,
			err:  true,
		},
		{
			name: "a call",
			code: []byte{0xe8, 1, 2, 3, 4, 0x55},
			last: 5,
			err:  true,
		},
		{
			name: "cut short",
			code: []byte{0x48, 0x85},
			last: 0,
			err:  true,
		},
	} {
		if c.dst == 0 {
			c.dst = 0x7f0000000000
		}
		got, err := bypassCode(c.code, at, c.last, c.dst)
		switch {
		case c.err && err == nil:
			t.Errorf("%s: bypass % x, want an error", c.name, got)
		case c.err && !errors.Is(err, errNoBypass) && !errors.Is(err, errUnknownInst) && err.Error() == "":
			t.Errorf("%s: %v", c.name, err)
		case !c.err && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.err && !bytes.Equal(got, c.want):
			t.Errorf("%s:\n got % x\nwant % x", c.name, got, c.want)
		}
	}
}
