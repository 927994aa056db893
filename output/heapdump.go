package output

import (
	"bufio"
	"io"
	"math/bits"
	"slices"
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
	// Snapshot, when set, stands for Records: the records are its
	// UniqueList(false), made one by one as they are written instead of
	// all at once (a record per block, 56 bytes, at worst). WriteHeapDump
	// puts its Allocs in SortList order (leak.Snapshot.Sort).
	Snapshot *leak.Snapshot
	// Maps is the text of the process's /proc/PID/maps, written verbatim.
	// Nil means that it could not be read.
	Maps []byte
	// BtInfo resolves a record's frames for the "bt_info" lines of the
	// backtrace_full option. Nil leaves the lines out. WriteHeapDump calls
	// it once per backtrace: records whose Frames are the same slice (the
	// same memory and length, as the records of one stack that UniqueList
	// returns) share one bt_info line, so BtInfo must resolve the same pcs
	// the same way throughout a dump.
	BtInfo func([]uint64) []stacks.Frame
	// Progress, when set, is told every ProgressStep records how far the
	// dump is ("writing"), then once "written".
	Progress func(phase string, done, total int)
}

// framesKey identifies a record's frames by their memory: records made from
// one stack of a snapshot share it.
type framesKey struct {
	first *uint64
	n     int
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
	records, total := len(d.Records), leak.TotalMemory(d.Records)
	if d.Snapshot != nil {
		d.Snapshot.Sort()
		records, total = d.Snapshot.SortedTotals(false)
	}
	b = append(b, "Total memory: "...)
	b = strconv.AppendUint(b, total, 10)
	b = append(b, "\nAllocation records: "...)
	b = strconv.AppendInt(b, int64(records), 10)
	b = append(b, "\nBacktrace size: "...)
	b = strconv.AppendInt(b, int64(d.BacktraceSize), 10)
	b = append(b, "\n\n"...)

	// The bt_info line of each backtrace, resolved and formatted once: a
	// stack's records differ only by size.
	var (
		btInfo    map[framesKey]string
		demangled map[string]string
	)
	if d.BtInfo != nil {
		btInfo = map[framesKey]string{}
		demangled = map[string]string{}
	}
	i := 0
	put := func(r *leak.Record) error {
		b = appendRecord(b, r)
		if d.BtInfo != nil && len(r.Frames) > 0 {
			k := framesKey{&r.Frames[0], len(r.Frames)}
			if line, ok := btInfo[k]; ok {
				b = append(b, line...)
			} else {
				start := len(b)
				b = appendBtInfo(b, d.BtInfo(r.Frames), demangled)
				btInfo[k] = string(b[start:])
			}
		}
		if d.Progress != nil && i > 0 && i%ProgressStep == 0 {
			d.Progress("writing", i, records)
		}
		i++
		if len(b) >= 32<<10 {
			if _, err := bw.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
		return nil
	}
	if d.Snapshot != nil {
		for r := range d.Snapshot.SortedRecords(false) {
			if err := put(&r); err != nil {
				return err
			}
		}
	} else {
		for i := range d.Records {
			if err := put(&d.Records[i]); err != nil {
				return err
			}
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
	if err := bw.Flush(); err != nil {
		return err
	}
	if d.Progress != nil {
		d.Progress("written", records, records)
	}
	return nil
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
	var num [20]byte
	b = appendPad(b, strconv.AppendUint(num[:0], r.Size, 10), 8, ' ')
	b = append(b, "  num    "...)
	b = strconv.AppendUint(b, r.Num, 10)
	b = append(b, "  bt"...)
	for _, pc := range r.Frames {
		if pc == 0 {
			break
		}
		b = append(b, ' ')
		b = appendHex(b, pc)
	}
	return append(b, '\n')
}

// appendHex appends v in lower-case hexadecimal without leading zeros, as
// strconv.AppendUint(b, v, 16) does, but straight into b: a heap dump of a
// million allocations has some ten million frames.
func appendHex(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	n := max((bits.Len64(v)+3)/4, 1)
	b = slices.Grow(b, n)
	end := len(b) + n
	b = b[:end]
	for i := end - 1; i >= end-n; i-- {
		b[i] = digits[v&15]
		v >>= 4
	}
	return b
}

// appendBtInfo appends the bt_info line of a record. demangled holds the
// names demangled so far, which many backtraces share.
func appendBtInfo(b []byte, frames []stacks.Frame, demangled map[string]string) []byte {
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
		name, ok := demangled[f.Func]
		if !ok {
			name = stacks.Demangle(f.Func)
			demangled[f.Func] = name
		}
		b = append(b, name...)
		b = append(b, `" `...)
		b = strconv.AppendUint(b, f.FuncOff, 16)
		b = append(b, '}')
	}
	return append(b, '\n')
}
