//go:build linux

package session

import (
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/tracer"
)

// TestPumpSyncWakes: sync returns because it wakes the reader, never by
// its deadline. The reader here waits past any deadline until it gets an
// item or a wake: a sync whose wake were spent before the pump saw it
// would hang.
func TestPumpSyncWakes(t *testing.T) {
	items := make(chan int, 1)
	wakes := make(chan struct{}, 1)
	next := func(deadline time.Time) (int, error) {
		select {
		case v := <-items:
			return v, nil
		default:
		}
		if !deadline.After(time.Now()) {
			return 0, tracer.ErrNoRecord
		}
		select {
		case v := <-items:
			return v, nil
		case <-wakes:
			return 0, tracer.ErrNoRecord
		}
	}
	wake := func() error {
		select {
		case wakes <- struct{}{}:
		default:
		}
		return nil
	}
	var got []int
	sync, stop := pump(next, func(v int) { got = append(got, v) }, wake)
	for i := range 2000 {
		if i%2 == 0 {
			items <- i
		}
		done := make(chan struct{})
		go func() { sync(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("sync %d did not return", i)
		}
		if i%2 == 0 && (len(got) == 0 || got[len(got)-1] != i) {
			t.Fatalf("sync %d returned before item %d was handled: %v", i, i, got[max(0, len(got)-3):])
		}
	}
	stop()
}
