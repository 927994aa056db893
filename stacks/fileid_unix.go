//go:build unix

package stacks

import (
	"os"
	"syscall"
)

// fileID returns the device and inode numbers of a file, which identify it
// together with its size and modification time.
func fileID(fi os.FileInfo) (dev, ino uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	// The conversions are needed where Stat_t uses other integer types.
	return uint64(st.Dev), uint64(st.Ino), true
}
