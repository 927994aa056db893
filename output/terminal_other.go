//go:build !linux

package output

import "io"

// IsTerminal reports whether w is a terminal; mdtrace runs on Linux only.
func IsTerminal(w io.Writer) bool { return false }
