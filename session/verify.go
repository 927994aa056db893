//go:build linux

package session

import (
	"errors"
	gosync "sync"
	"time"

	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/tracer"
)

// logDivider frames every error block, as in Android's log.
const logDivider = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***"

// checkFnNames are the names of the functions that check pointers.
var checkFnNames = map[uint32]string{
	tracer.FnFree:       "free",
	tracer.FnRealloc:    "realloc",
	tracer.FnUsableSize: "malloc_usable_size",
}

// pump calls handle with every item next returns, from its own goroutine,
// until stop is called; sync returns once every item already available
// has been handled. wake must make a next that waits for items return
// (see tracer.EventReader.Wake): sync does not wait out next's deadline.
// A sync is registered before it wakes the goroutine, which looks for
// syncs before each wait: a wake cannot be spent before its sync is seen.
func pump[T any](next func(deadline time.Time) (T, error), handle func(T), wake func() error) (sync, stop func()) {
	var (
		mu      gosync.Mutex
		waiting []chan struct{}
	)
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		for {
			mu.Lock()
			syncs := waiting
			waiting = nil
			mu.Unlock()
			if len(syncs) > 0 {
				for {
					item, err := next(time.Now())
					if err != nil {
						break
					}
					handle(item)
				}
				for _, reply := range syncs {
					close(reply)
				}
				continue
			}
			select {
			case <-quit:
				return
			default:
			}
			item, err := next(time.Now().Add(100 * time.Millisecond))
			switch {
			case err == nil:
				handle(item)
			case errors.Is(err, tracer.ErrNoRecord):
			default:
				return
			}
		}
	}()
	sync = func() {
		reply := make(chan struct{})
		mu.Lock()
		waiting = append(waiting, reply)
		mu.Unlock()
		wake()
		select {
		case <-reply:
		case <-done:
		}
	}
	stop = func() {
		close(quit)
		wake()
		<-done
	}
	return sync, stop
}

// logPointerError logs a verify_pointers error as Android's LogError does.
func (s *session) logPointerError(e tracer.PointerError) {
	pid, tid := int(e.Tgid), int(e.Tid)
	fn := checkFnNames[e.Fn]
	// Android says USED AFTER FREE only from a block's header, which the
	// probes do not add: a pointer that is not a live block, freed before
	// or never allocated, is an UNKNOWN POINTER, the original free's
	// backtrace following when the probes saw it (as Android's free_track
	// gives it).
	what := "UNKNOWN POINTER (" + fn + ")"
	if c, err := s.probes.Counters(); e.Freed == 0 && err == nil && c.TableFull > 0 {
		// The table missed allocations: an unknown pointer may be one.
		s.unknownSuppressed++
		return
	}
	p := s.traced(pid)
	if p == nil {
		p = &proc{pid: pid}
	}
	frames := s.frames(p, s.mapsOf(p))
	s.log.Errorf(pid, tid, "%s", logDivider)
	s.log.Errorf(pid, tid, "+++ ALLOCATION 0x%x %s", e.Ptr, what)
	if pcs := s.probes.Stack(e.FreeStack); e.Freed != 0 && len(pcs) > 0 {
		s.log.Errorf(pid, tid, "Backtrace of original free:")
		s.log.Errorf(pid, tid, "%s", output.BacktraceString(frames(pcs)))
	}
	s.log.Errorf(pid, tid, "Backtrace at time of failure:")
	if pcs := s.probes.Stack(e.FailStack); len(pcs) > 0 {
		s.log.Errorf(pid, tid, "%s", output.BacktraceString(frames(pcs)))
	} else {
		s.log.Errorf(pid, tid, "  Backtrace failed to get any frames.")
	}
	s.log.Errorf(pid, tid, "%s", logDivider)
}

// watchPointerErrors logs verify_pointers errors as they come.
func (s *session) watchPointerErrors() (sync, stop func(), err error) {
	r, err := s.probes.PointerErrors()
	if err != nil {
		return nil, nil, err
	}
	var e tracer.PointerError
	sync, stopPump := pump(func(d time.Time) (tracer.PointerError, error) {
		err := r.Next(d, &e)
		return e, err
	}, s.logPointerError, r.Wake)
	return sync, func() {
		r.Close()
		stopPump()
		if s.unknownSuppressed > 0 {
			s.notice("%d unknown pointers were not reported: the live table was full, so they may be blocks it missed", s.unknownSuppressed)
		}
	}, nil
}
