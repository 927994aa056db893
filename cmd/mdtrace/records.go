//go:build linux

package main

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/tracer"
)

// recorder keeps the records of record_allocs: it reads them from the
// probes' ring buffer as they come, keeps at most max of them, and writes
// them in Android's format on request.
type recorder struct {
	s    *session
	rd   *tracer.EventReader[tracer.Record]
	max  uint64
	recs *recordStore
	full bool
	// spillFailed is set when records could not be spilled to disk.
	spillFailed bool

	reqs chan recordRequest
	stop chan struct{}
	done chan struct{}
}

// recordRequest asks the recorder to write its records to path, and to
// forget them afterwards when clear is set.
type recordRequest struct {
	path  string
	clear bool
	reply chan struct{}
}

// recordPoll bounds how long a request waits for the reader.
const recordPoll = 50 * time.Millisecond

func newRecorder(s *session, max uint64) (*recorder, error) {
	rd, err := s.probes.Records()
	if err != nil {
		return nil, err
	}
	r := &recorder{s: s, rd: rd, max: max, recs: newRecordStore(defaultRecordMemLimit), reqs: make(chan recordRequest), stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r, nil
}

func (r *recorder) run() {
	defer close(r.done)
	var ev tracer.Record
	for {
		select {
		case q := <-r.reqs:
			r.drain()
			r.write(q.path)
			if q.clear {
				r.recs.Clear()
				if r.full {
					r.full = false
					r.s.probes.SetRecording(true)
				}
			}
			close(q.reply)
			continue
		case <-r.stop:
			return
		default:
		}
		err := r.rd.Next(time.Now().Add(recordPoll), &ev)
		switch {
		case err == nil:
			r.add(&ev)
		case errors.Is(err, tracer.ErrNoRecord):
		default:
			return
		}
	}
}

// drain takes every record already in the ring buffer.
func (r *recorder) drain() {
	var ev tracer.Record
	for r.rd.Next(time.Now(), &ev) == nil {
		r.add(&ev)
	}
}

func (r *recorder) add(ev *tracer.Record) {
	if r.recs.Len() >= r.max {
		if !r.full {
			r.full = true
			r.s.probes.SetRecording(false)
			r.s.log.Infof(r.s.pid, r.s.pid, "Maximum number of records added, all new operations will be dropped.")
		}
		return
	}
	err := r.recs.Add(output.Record{
		TID:     int32(ev.Tid),
		Type:    output.RecordType(ev.Type),
		Ptr:     ev.Ptr,
		Size:    ev.Size,
		Arg:     ev.Arg,
		StartNS: ev.StartNs,
		EndNS:   ev.EndNs,
		Present: -1,
	})
	if err != nil && !r.spillFailed {
		r.spillFailed = true
		r.s.notice("%v: records stay in memory", err)
		r.recs.memLimit = int(r.max) + 1
	}
}

// write writes the records to path, each thread's in call order and the
// threads interleaved by start time, as Android's messages say.
func (r *recorder) write(path string) {
	if r.recs.Len() == 0 {
		r.s.log.Infof(r.s.pid, r.s.pid, "No alloc entries to write.")
		return
	}
	err := output.WriteFileAtomic(path, 0o644, func(w io.Writer) error {
		rw := output.NewRecordWriter(w)
		if err := r.recs.Each(rw.Write); err != nil {
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

// Write writes the records to path now; with clear they are forgotten.
func (r *recorder) Write(path string, clear bool) {
	q := recordRequest{path: path, clear: clear, reply: make(chan struct{})}
	select {
	case r.reqs <- q:
		<-q.reply
	case <-r.done:
	}
}

// Close stops the recorder.
func (r *recorder) Close() {
	close(r.stop)
	<-r.done
	r.rd.Close()
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
