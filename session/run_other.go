//go:build !linux

package session

import (
	"errors"
	"io"

	"github.com/mdtrace/mdtrace/options"
)

var errLinuxOnly = errors.New("mdtrace runs on Linux only")

// Run traces the process the flags name: Linux only.
func Run(*options.Flags, *options.Config, io.Writer) (int, error) { return 1, errLinuxOnly }

// RunAll audits every process: Linux only.
func RunAll(*options.Flags, io.Writer, io.Writer) (int, error) { return 1, errLinuxOnly }

// CheckPrivileges verifies mdtrace's capabilities: Linux only.
func CheckPrivileges() error { return errLinuxOnly }
