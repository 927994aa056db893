//go:build !linux

package main

import (
	"errors"
	"io"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/tracer"
)

func run(*Flags, *options.Config, io.Writer) (int, error) {
	return 1, errors.New("mdtrace runs on Linux only")
}
