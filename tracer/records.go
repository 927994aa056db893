//go:build linux

package tracer

import (
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/output"
)

// Record is one allocator call of a traced process, for record_allocs. Its
// Type is one of enum record_type in abi/mdtrace_abi.h (abi.RecordMalloc
// and on), output.RecordType's values.
type Record = bpf.MdtraceRecordEvent

// OutputRecord is ev as a record_allocs entry, with the PRESENT_BYTES of
// a free's or a realloc's old block when the shim read it (else -1).
func OutputRecord(ev *Record) output.Record {
	return output.Record{
		TID:     int32(ev.Tid),
		Type:    output.RecordType(ev.Type),
		Ptr:     ev.Ptr,
		Size:    ev.Size,
		Arg:     ev.Arg,
		StartNS: ev.StartNs,
		EndNS:   ev.EndNs,
		Present: int64(ev.Present) - 1,
		PID:     int32(ev.Tgid),
	}
}

// Records opens the reader of the record_allocs ring buffer.
func (p *Probes) Records() (*EventReader[Record], error) {
	return newEventReader[Record](p.objs.Records, "record")
}

// SetRecording turns the sending of records on or off while tracing.
func (p *Probes) SetRecording(on bool) error {
	return p.objs.RecordOn.Set(boolU32(on))
}
