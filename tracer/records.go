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

// Record types; they mirror enum record_type in bpf/mdtrace.bpf.c and
// the order of Android's record_allocs entry types.
const (
	RecordMalloc = iota + 1
	RecordCalloc
	RecordMemalign
	RecordRealloc
	RecordFree
	RecordThreadDone
)

// Record is one allocator call of a traced process, for record_allocs.
type Record = bpf.MdtraceRecordEvent

// ErrNoRecord means that no record arrived before the deadline.
var ErrNoRecord = errors.New("no record")

// RecordReader reads the records the probes send. It is not safe for
// concurrent use; Close may be called from another goroutine.
type RecordReader struct {
	rd  *ringbuf.Reader
	raw ringbuf.Record
}

// Records opens the reader of the record_allocs ring buffer.
func (p *Probes) Records() (*RecordReader, error) {
	rd, err := ringbuf.NewReader(p.objs.Records)
	if err != nil {
		return nil, fmt.Errorf("opening the record ring buffer: %w", err)
	}
	return &RecordReader{rd: rd}, nil
}

// Next reads the next record into r, waiting until deadline at the most;
// it returns ErrNoRecord when none came, and os.ErrClosed once closed.
func (r *RecordReader) Next(deadline time.Time, rec *Record) error {
	r.rd.SetDeadline(deadline)
	if err := r.rd.ReadInto(&r.raw); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return ErrNoRecord
		}
		return err
	}
	if len(r.raw.RawSample) < int(unsafe.Sizeof(*rec)) {
		return fmt.Errorf("short record: %d bytes", len(r.raw.RawSample))
	}
	*rec = *(*Record)(unsafe.Pointer(&r.raw.RawSample[0]))
	return nil
}

// Close stops the reader.
func (r *RecordReader) Close() error { return r.rd.Close() }

// SetRecording turns the sending of records on or off while tracing.
func (p *Probes) SetRecording(on bool) error {
	return p.objs.RecordOn.Set(boolU32(on))
}
