//go:build linux

package session

import (
	"cmp"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/record"
	"github.com/mdtrace/mdtrace/tracer"
)

// recordStream makes n record_allocs events as the ring buffer delivers
// them: 4 threads allocating and freeing, a call every 50 to 300 ns, each
// lasting 100 to 1000 ns, the events in the order the calls return.
func recordStream(n int) []tracer.Record {
	rng := rand.New(rand.NewPCG(5, 6))
	var live [4][]uint64
	out := make([]tracer.Record, n)
	now := uint64(1e12)
	ptr := uint64(0x55d000000000)
	for i := range out {
		t := rng.IntN(4)
		now += 50 + rng.Uint64N(250)
		ev := tracer.Record{Tid: uint32(4242 + t), Tgid: 4242, StartNs: now, EndNs: now + 100 + rng.Uint64N(900)}
		if len(live[t]) > 0 && rng.IntN(2) == 0 {
			j := rng.IntN(len(live[t]))
			ev.Type, ev.Ptr = abi.RecordFree, live[t][j]
			live[t][j] = live[t][len(live[t])-1]
			live[t] = live[t][:len(live[t])-1]
		} else {
			ev.Type, ev.Ptr, ev.Size = abi.RecordMalloc, ptr, 1+rng.Uint64N(4096)
			ptr += 16 + (ev.Size+15)&^15
			live[t] = append(live[t], ev.Ptr)
		}
		out[i] = ev
	}
	slices.SortStableFunc(out, func(a, b tracer.Record) int { return cmp.Compare(a.EndNs, b.EndNs) })
	return out
}

// BenchmarkRecorder measures mdtrace's record_allocs path after the ring
// buffer (see tracer's BenchmarkRecordStream for the ring buffer): the
// recorder keeping 1.5 million events (spilling the first million to its
// temporary file, as past defaultRecordMemLimit), then writing them all,
// sorted, to a record_allocs file. It reports the events per second of
// the whole and the nanoseconds per event of each phase.
func BenchmarkRecorder(b *testing.B) {
	const n = 1_500_000
	events := recordStream(n)
	path := filepath.Join(b.TempDir(), "records")
	var add, write time.Duration
	b.ReportAllocs()
	for b.Loop() {
		r := &recorder{mode: 0o600, max: n, keep: true, recs: record.NewStore(record.DefaultMemLimit), perPID: map[int32]uint64{}}
		t0 := time.Now()
		for i := range events {
			r.add(&events[i])
		}
		t1 := time.Now()
		r.write(path, 4242)
		add += t1.Sub(t0)
		write += time.Since(t1)
		r.recs.Close()
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*n) }
	b.ReportMetric(per(add), "ns/event-keep")
	b.ReportMetric(per(write), "ns/event-write")
	b.ReportMetric(float64(b.N*n)/(add+write).Seconds(), "events/s")
}
