//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

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

// ErrorReader reads verify_pointers errors.
type ErrorReader struct {
	rd  *ringbuf.Reader
	raw ringbuf.Record
}

// PointerErrors opens the reader of verify_pointers errors.
func (p *Probes) PointerErrors() (*ErrorReader, error) {
	rd, err := ringbuf.NewReader(p.objs.Errors)
	if err != nil {
		return nil, fmt.Errorf("opening the error ring buffer: %w", err)
	}
	return &ErrorReader{rd: rd}, nil
}

// Next reads the next error into e, waiting until deadline at the most
// (ErrNoRecord when none came; os.ErrClosed once closed).
func (r *ErrorReader) Next(deadline time.Time, e *PointerError) error {
	r.rd.SetDeadline(deadline)
	if err := r.rd.ReadInto(&r.raw); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return ErrNoRecord
		}
		return err
	}
	if len(r.raw.RawSample) < int(unsafe.Sizeof(*e)) {
		return fmt.Errorf("short error: %d bytes", len(r.raw.RawSample))
	}
	*e = *(*PointerError)(unsafe.Pointer(&r.raw.RawSample[0]))
	return nil
}

// Close stops the reader.
func (r *ErrorReader) Close() error { return r.rd.Close() }
