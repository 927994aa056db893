//go:build linux

package output

import "golang.org/x/sys/unix"

// uname returns the kernel release and the machine of uname(2), "" when the
// call fails.
func uname() (release, machine string) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", ""
	}
	return unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Machine[:])
}
