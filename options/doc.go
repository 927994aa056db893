// Package options parses Android's malloc debug option string
// (libc.debug.malloc.options, LIBC_DEBUG_MALLOC_OPTIONS) into a Config
// with the same names, aliases, value ranges and error messages as
// Android's Config parser, and holds the option bits, defaults, limits and
// signal numbers Android uses. It needs no kernel.
package options

//go:generate go run ./gen ../docs/mdtrace.1
