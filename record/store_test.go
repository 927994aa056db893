package record

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/mdtrace/mdtrace/output"
)

// TestRecordStoreSpills checks that spilled runs and memory merge into the
// same order an in-memory stable sort gives.
func TestRecordStoreSpills(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var all []output.Record
	now := map[int32]uint64{}
	for i := 0; i < 10000; i++ {
		tid := int32(100 + rng.Intn(4))
		now[tid] += uint64(1 + rng.Intn(50))
		r := output.Record{TID: tid, Type: output.RecordMalloc, Ptr: uint64(i), Size: uint64(rng.Intn(100)), StartNS: now[tid], EndNS: now[tid] + 1, Present: -1}
		if i%1000 == 999 {
			r = output.Record{TID: tid, Type: output.RecordThreadDone, EndNS: now[tid], Present: -1}
		}
		all = append(all, r)
	}
	// What an in-memory stable sort of everything gives, against a store
	// that spills every 777 records (runs of chunks of 97) and one that
	// keeps them all in memory (chunks of 1250).
	sorted := slices.Clone(all)
	sortRecords(sorted)
	var w []string
	for _, r := range sorted {
		w = append(w, fmt.Sprint(r))
	}
	got, inMem := NewStore(777), NewStore(len(all)+1)
	defer got.Close()
	for _, r := range all {
		if err := got.Add(r); err != nil {
			t.Fatal(err)
		}
		if err := inMem.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if inMem.file != nil || len(inMem.chunks) != 8 {
		t.Errorf("in memory: %d chunks, spill file %v; want 8 chunks, no file", len(inMem.chunks), inMem.file)
	}
	if len(got.runs) != len(all)/777 {
		t.Errorf("%d runs spilled, want %d", len(got.runs), len(all)/777)
	}
	collect := func(s *Store) []string {
		var out []string
		s.Each(func(r *output.Record) error {
			out = append(out, fmt.Sprint(*r))
			return nil
		})
		return out
	}
	for _, s := range []*Store{got, inMem} {
		g := collect(s)
		if len(g) != len(w) || s.Len() != uint64(len(all)) {
			t.Fatalf("%d records merged, want %d", len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("record %d: %s, want %s", i, g[i], w[i])
			}
		}
	}
	// After Clear, the chunks are used again.
	inMem.Clear()
	for _, r := range all[:3000] {
		inMem.Add(r)
	}
	if g := collect(inMem); len(g) != 3000 || len(inMem.spare) != 5 {
		t.Errorf("after Clear and 3000 records: %d merged, %d spare chunks; want 3000 and 5", len(g), len(inMem.spare))
	}
	got.Clear()
	if n := len(collect(got)); n != 0 || got.Len() != 0 {
		t.Errorf("%d records after Clear", n)
	}
}
