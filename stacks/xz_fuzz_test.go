package stacks

import (
	"bytes"
	"os/exec"
	"testing"
)

// FuzzUnxz feeds the MiniDebugInfo decompressor arbitrary bytes: it must
// never panic nor return more than its limit.
func FuzzUnxz(f *testing.F) {
	if path, err := exec.LookPath("xz"); err == nil {
		for _, in := range [][]byte{[]byte("hello"), bytes.Repeat([]byte{0}, 100000)} {
			cmd := exec.Command(path, "-c")
			cmd.Stdin = bytes.NewReader(in)
			if out, err := cmd.Output(); err == nil {
				f.Add(out)
			}
		}
	}
	f.Add([]byte{0xfd, '7', 'z', 'X', 'Z', 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 16
		out, err := unxz(data, limit)
		if err == nil && int64(len(out)) > limit {
			t.Fatalf("%d bytes out of a %d limit", len(out), limit)
		}
	})
}
