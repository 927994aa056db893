//go:build unix

package stacks

import (
	"fmt"
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

// mapsDev formats a device number as /proc/PID/maps prints it on Linux,
// "major:minor" in hex, with Linux's encoding of the two in a dev_t.
func mapsDev(dev uint64) string {
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return fmt.Sprintf("%02x:%02x", major, minor)
}
