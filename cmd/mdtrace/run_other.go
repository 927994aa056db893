//go:build !linux

package main

import (
	"errors"
	"io"

	"github.com/mdtrace/mdtrace/tracer"
)

func run(*Flags, *tracer.Config, io.Writer) (int, error) {
	return 1, errors.New("mdtrace runs on Linux only")
}
