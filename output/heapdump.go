package output

import (
	"bufio"
	"io"
	"strconv"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// HeapDumpVersion is the version of the Android Native Heap Dump format that
// WriteHeapDump writes.
const HeapDumpVersion = "v1.2"

// noMaps stands in the MAPS section when the process's maps could not be
// read, as in Android.
const noMaps = "Could not open /proc/self/maps\n"

// HeapDump is the content of an Android Native Heap Dump.
type HeapDump struct {
	// Fingerprint is written in the "Build fingerprint" line; see
	// BuildFingerprint.
	Fingerprint string
	// BacktraceSize is the maximum number of frames of a backtrace (the
	// value of the backtrace option).
	BacktraceSize int
	// Records are the allocation records, normally a snapshot's
	// UniqueList(false).
	Records []leak.Record
	// Maps is the text of the process's /proc/PID/maps, written verbatim.
	// Nil means that it could not be read.
	Maps []byte
	// BtInfo resolves a record's frames for the "bt_info" lines of the
	// backtrace_full option. Nil leaves the lines out.
	BtInfo func([]uint64) []stacks.Frame
}

// WriteHeapDump writes d to w as Android's malloc debug writes a heap dump,
// version v1.2, byte for byte:
//
//	Android Native Heap Dump v1.2
//
//	Build fingerprint: 'FINGERPRINT'
//
//	Total memory: TOTAL
//	Allocation records: N
//	Backtrace size: FRAMES
//
//	z 0  sz       50  num    1  bt a100 b200
//	  bt_info {"/usr/lib/libc.so.6" a100 "malloc" 10} {"" b200 "" 0}
//	MAPS
//	...
//	END
//
// Total memory is leak.TotalMemory of the records. A record's frames are
// absolute pcs in lower-case hex without padding, stopping at the first zero
// frame; a record without frames ends in " bt". With d.BtInfo set, each
// record with frames is followed by a bt_info line with one
// {"MAP" RELPC "FUNC" FUNCOFF} group per resolved frame: MAP is "" for an
// unknown mapping, the numbers are hex without "0x", and a frame without a
// function shows "" 0. The maps follow "MAPS" verbatim, with a final newline
// added when missing; nil maps are replaced by Android's
// "Could not open /proc/self/maps" line.
func WriteHeapDump(w io.Writer, d *HeapDump) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var b []byte

	b = append(b, "Android Native Heap Dump "+HeapDumpVersion+"\n\n"...)
	b = append(b, "Build fingerprint: '"...)
	b = append(b, d.Fingerprint...)
	b = append(b, "'\n\n"...)
	b = append(b, "Total memory: "...)
	b = strconv.AppendUint(b, leak.TotalMemory(d.Records), 10)
	b = append(b, "\nAllocation records: "...)
	b = strconv.AppendInt(b, int64(len(d.Records)), 10)
	b = append(b, "\nBacktrace size: "...)
	b = strconv.AppendInt(b, int64(d.BacktraceSize), 10)
	b = append(b, "\n\n"...)

	for i := range d.Records {
		r := &d.Records[i]
		b = appendRecord(b, r)
		if d.BtInfo != nil && len(r.Frames) > 0 {
			b = appendBtInfo(b, d.BtInfo(r.Frames))
		}
		if len(b) >= 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}

	b = append(b, "MAPS\n"...)
	if _, err := bw.Write(b); err != nil {
		return err
	}
	b = b[:0]
	if d.Maps == nil {
		b = append(b, noMaps...)
	} else {
		if _, err := bw.Write(d.Maps); err != nil {
			return err
		}
		if len(d.Maps) > 0 && d.Maps[len(d.Maps)-1] != '\n' {
			b = append(b, '\n')
		}
	}
	b = append(b, "END\n"...)
	if _, err := bw.Write(b); err != nil {
		return err
	}
	return bw.Flush()
}

// appendRecord appends "z Z  sz %8d  num    N  bt FRAMES\n".
func appendRecord(b []byte, r *leak.Record) []byte {
	b = append(b, "z "...)
	if r.Zygote {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, "  sz "...)
	b = appendPad(b, strconv.AppendUint(nil, r.Size, 10), 8, ' ')
	b = append(b, "  num    "...)
	b = strconv.AppendUint(b, r.Num, 10)
	b = append(b, "  bt"...)
	for _, pc := range r.Frames {
		if pc == 0 {
			break
		}
		b = append(b, ' ')
		b = strconv.AppendUint(b, pc, 16)
	}
	return append(b, '\n')
}

// appendBtInfo appends the bt_info line of a record.
func appendBtInfo(b []byte, frames []stacks.Frame) []byte {
	b = append(b, "  bt_info"...)
	for _, f := range frames {
		b = append(b, ` {"`...)
		b = append(b, f.MapName...)
		b = append(b, `" `...)
		b = strconv.AppendUint(b, f.RelPC, 16)
		if f.Func == "" {
			b = append(b, ` "" 0}`...)
			continue
		}
		b = append(b, ` "`...)
		b = append(b, stacks.Demangle(f.Func)...)
		b = append(b, `" `...)
		b = strconv.AppendUint(b, f.FuncOff, 16)
		b = append(b, '}')
	}
	return append(b, '\n')
}
