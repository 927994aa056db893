//go:build linux

package tracer

import (
	"github.com/mdtrace/mdtrace/bpf"
)

// Functions that check pointers (PointerError.Fn).
const (
	FnFree = iota + 1
	FnRealloc
	FnUsableSize
)

// PointerError is a bad pointer found by verify_pointers.
type PointerError = bpf.MdtracePointerError

// PointerErrors opens the reader of verify_pointers errors.
func (p *Probes) PointerErrors() (*EventReader[PointerError], error) {
	return newEventReader[PointerError](p.objs.Errors, "error")
}
