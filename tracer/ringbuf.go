//go:build linux

package tracer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// ErrNoRecord means that no event arrived before the deadline.
var ErrNoRecord = errors.New("no record")

// EventReader reads fixed-size events of type T from one of the probes'
// ring buffers. It is not safe for concurrent use; Close and Wake may be
// called from another goroutine.
type EventReader[T any] struct {
	rd  *ringbuf.Reader
	raw ringbuf.Record
}

func newEventReader[T any](m *ebpf.Map, what string) (*EventReader[T], error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, fmt.Errorf("opening the %s ring buffer: %w", what, err)
	}
	return &EventReader[T]{rd: rd}, nil
}

// Next reads the next event into e without allocating, waiting until
// deadline at the most; it returns ErrNoRecord when none came, and
// os.ErrClosed once closed.
func (r *EventReader[T]) Next(deadline time.Time, e *T) error {
	r.rd.SetDeadline(deadline)
	if err := r.rd.ReadInto(&r.raw); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ringbuf.ErrFlushed) {
			return ErrNoRecord
		}
		return err
	}
	if len(r.raw.RawSample) < int(unsafe.Sizeof(*e)) {
		return fmt.Errorf("short event: %d bytes", len(r.raw.RawSample))
	}
	*e = *(*T)(unsafe.Pointer(&r.raw.RawSample[0]))
	return nil
}

// Close stops the reader.
func (r *EventReader[T]) Close() error { return r.rd.Close() }

// Queued returns the bytes of the events sent and not read yet.
func (r *EventReader[T]) Queued() int { return r.rd.AvailableBytes() }

// Wake ends the wait of Next, now or, if it is not waiting, the next time
// it would wait: once the events already in the buffer are read, it
// returns ErrNoRecord without waiting for its deadline.
func (r *EventReader[T]) Wake() error { return r.rd.Flush() }

// cString is the NUL-terminated string in a char array of an event.
func cString(a []int8) string {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a))), len(a))
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
