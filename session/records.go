//go:build linux

package session

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/record"
	"github.com/mdtrace/mdtrace/stats"
	"github.com/mdtrace/mdtrace/tracer"
)

// recorder keeps the records of record_allocs: it reads them from the
// probes' ring buffer as they come, keeps at most max of them, and writes
// them in Android's format on request; with --stats it adds every one up
// into its process's statistics. It is safe for concurrent use.
type recorder struct {
	s *session
	// keep is set with record_allocs: the records are kept for the
	// record files.
	keep bool
	// stats are the statistics of each process, with --stats, each fed
	// by its Orderer.
	stats map[int32]*stats.Orderer
	// statsNotes are what each process's statistics miss.
	statsNotes map[int32][]string
	// mode is the permissions of the files written (--file-mode).
	mode os.FileMode
	rd   *tracer.EventReader[tracer.Record]
	max  uint64
	// sync returns once every record sent so far is kept; stop ends the
	// reading.
	sync, stop func()

	mu   sync.Mutex
	recs *record.Store
	// perPID counts the records kept of each process: each has its own
	// record file.
	perPID map[int32]uint64
	full   bool
	// spillFailed is set when records could not be spilled to disk.
	spillFailed bool
}

func newRecorder(s *session, max uint64, keep, withStats bool) (*recorder, error) {
	rd, err := s.probes.Records()
	if err != nil {
		return nil, err
	}
	r := &recorder{s: s, keep: keep, mode: s.flags.FileMode, rd: rd, max: max, recs: record.NewStore(record.DefaultMemLimit), perPID: map[int32]uint64{}}
	if withStats {
		r.stats = map[int32]*stats.Orderer{}
		r.statsNotes = map[int32][]string{}
	}
	var ev tracer.Record
	r.sync, r.stop = pump(func(deadline time.Time) (*tracer.Record, error) {
		err := rd.Next(deadline, &ev)
		return &ev, err
	}, r.add, rd.Wake)
	return r, nil
}

func (r *recorder) add(ev *tracer.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stats != nil {
		o := r.stats[int32(ev.Tgid)]
		if o == nil {
			o = stats.NewOrderer(stats.New())
			r.stats[int32(ev.Tgid)] = o
		}
		// Records come in the order the probes send them, at the end
		// of each call: a call that started statsWindow before this
		// one ended has sent its own.
		var watermark uint64
		if ev.EndNs > statsWindow {
			watermark = ev.EndNs - statsWindow
		}
		o.Push(stats.Call{TID: int32(ev.Tid), Type: output.RecordType(ev.Type), Ptr: ev.Ptr, Size: ev.Size, Arg: ev.Arg,
			StartNS: ev.StartNs, EndNS: ev.EndNs, Stack: ev.StackId}, watermark)
	}
	if !r.keep {
		return
	}
	if r.recs.Len() >= r.max {
		if !r.full {
			r.full = true
			if r.stats == nil {
				// Statistics need every call: with them the records
				// still come, and are dropped here.
				r.s.probes.SetRecording(false)
			}
			r.s.log.Infof(r.s.pid, r.s.pid, "Maximum number of records added, all new operations will be dropped.")
		}
		return
	}
	rec := tracer.OutputRecord(ev)
	err := r.recs.Add(rec)
	r.perPID[rec.PID]++
	if err != nil && !r.spillFailed {
		r.spillFailed = true
		r.s.notice("%v: records stay in memory", err)
		r.recs.KeepInMemory(int(r.max) + 1)
	}
}

// write writes the records of process pid to path, each thread's in call
// order and the threads interleaved by start time, as Android's messages
// say.
func (r *recorder) write(path string, pid int32) {
	if r.perPID[pid] == 0 {
		r.s.log.Infof(int(pid), int(pid), "No alloc entries to write.")
		return
	}
	err := output.WriteFileAtomic(path, r.mode, func(w io.Writer) error {
		rw := output.NewRecordWriter(w)
		err := r.recs.Each(func(rec *output.Record) error {
			if rec.PID != pid {
				return nil
			}
			return rw.Write(rec)
		})
		if err != nil {
			return err
		}
		return rw.Flush()
	})
	if err != nil {
		var perr *os.PathError
		if errors.As(err, &perr) && perr.Op == "write" {
			r.s.log.Errorf(r.s.pid, r.s.pid, "Failed to write record alloc information: %s", strerror(err))
			return
		}
		r.s.log.Errorf(r.s.pid, r.s.pid, "Cannot create record alloc file %s: %s", path, strerror(err))
	}
}

// WriteAll writes the records of every process now, every record already
// sent included, as signal 46 does: those of process first to path, as on
// Android, those of each other process to path.PID. With clear they are
// forgotten.
func (r *recorder) WriteAll(path string, first int, clear bool) {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recs.Len() == 0 {
		r.s.log.Infof(first, first, "No alloc entries to write.")
		return
	}
	for _, pid := range slices.Sorted(maps.Keys(r.perPID)) {
		p := path
		if int(pid) != first {
			p = fmt.Sprintf("%s.%d", path, pid)
		}
		r.write(p, pid)
	}
	if clear {
		r.recs.Clear()
		r.perPID = map[int32]uint64{}
		if r.full {
			r.full = false
			r.s.probes.SetRecording(true)
		}
	}
}

// WriteProcess writes the records of process pid to path now, and keeps
// them, as record_allocs_on_exit does at the process's exit.
func (r *recorder) WriteProcess(path string, pid int) {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.write(path, int32(pid))
}

// statsWindow is how long the statistics hold a call back, in case a call
// that took effect before it comes later: as long as a call of the
// traced process may last.
const statsWindow = uint64(250 * time.Millisecond)

// takeStats returns the statistics of process pid, every record already
// sent added, and forgets them; nil if it made no call. late counts the
// calls taken out of order, which came more than statsWindow late.
func (r *recorder) takeStats(pid int) (st *stats.Stats, late uint64, notes []string) {
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	notes = r.statsNotes[int32(pid)]
	delete(r.statsNotes, int32(pid))
	o := r.stats[int32(pid)]
	if o == nil {
		return nil, 0, notes
	}
	delete(r.stats, int32(pid))
	o.Flush()
	return o.Stats(), o.Late, notes
}

// forkStats starts the statistics of a child forked by parent, held
// before it runs: a fork child's heap is a copy of its parent's, a vfork
// child's is its parent's, and none of its blocks is its own.
func (r *recorder) forkStats(parent, child int, vfork bool) {
	if r.stats == nil {
		return
	}
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.stats[int32(parent)]
	if o == nil || vfork {
		return
	}
	// The parent is stopped in fork: its calls before it are all sent.
	o.Flush()
	r.stats[int32(child)] = stats.NewOrderer(o.Stats().Fork())
}

// execStats starts the statistics of process pid again: it executed a
// new program, and its old image's blocks are gone with it.
func (r *recorder) execStats(pid int, prog string) {
	if r.stats == nil {
		return
	}
	r.sync()
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.stats[int32(pid)]
	if o == nil {
		return
	}
	o.Flush()
	if n := o.Stats().Calls(); n > 0 {
		r.statsNotes[int32(pid)] = append(r.statsNotes[int32(pid)], fmt.Sprintf("the statistics are of the program it executed last, %s: the %d calls before are not counted", prog, n))
	}
	delete(r.stats, int32(pid))
}

// Close stops the recorder.
func (r *recorder) Close() {
	r.rd.Close()
	r.stop()
	r.recs.Close()
}

// strerror renders an error's errno as glibc's strerror does.
func strerror(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	msg := errno.Error()
	if msg != "" && msg[0] >= 'a' && msg[0] <= 'z' {
		msg = string(msg[0]-'a'+'A') + msg[1:]
	}
	return msg
}
