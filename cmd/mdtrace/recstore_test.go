package main

import (
	"fmt"
	"math/rand"
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
	want := newRecordStore(len(all) + 1)
	got := newRecordStore(777)
	defer got.Close()
	for _, r := range all {
		want.Add(r)
		if err := got.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if len(got.runs) != len(all)/777 {
		t.Errorf("%d runs spilled, want %d", len(got.runs), len(all)/777)
	}
	collect := func(s *recordStore) []string {
		var out []string
		s.Each(func(r *output.Record) error {
			out = append(out, fmt.Sprint(*r))
			return nil
		})
		return out
	}
	w, g := collect(want), collect(got)
	if len(g) != len(w) || got.Len() != uint64(len(all)) {
		t.Fatalf("%d records merged, want %d", len(g), len(w))
	}
	for i := range w {
		if g[i] != w[i] {
			t.Fatalf("record %d: %s, want %s", i, g[i], w[i])
		}
	}
	got.Clear()
	if n := len(collect(got)); n != 0 || got.Len() != 0 {
		t.Errorf("%d records after Clear", n)
	}
}
