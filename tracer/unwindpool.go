//go:build linux

package tracer

import (
	"math/bits"

	"github.com/cilium/ebpf"
)

// Placing a table in unwind_tables, an array of maps, waits for an RCU
// grace period: the kernel makes sure no program still runs with the slot's
// old map before the update returns (maybe_wait_bpf_programs), 10 to 20 ms
// on the 2-CPU VM of the measures. A process whose program mdtrace had no
// table of waited that long for its list, held at its exec in the modes
// that hold, its first walks deferred meanwhile under --all: a run of 30 ms
// ended before its list was there, and its backtraces were cut at the
// first frame built without frame pointers.
//
// So tables of up to 1 << poolMaxShift entries go into arrays placed
// ahead, poolDepth of each power of two from 1 << poolMinShift, made again
// in the background as they are taken: a table of n entries takes the
// smallest that holds it, and the array's entries past n are never read
// (the walk's search is bounded by the table's count). Larger tables, whose
// parse takes milliseconds anyway, are placed as they come. The pool takes
// room like any table, at most twice what its tables hold, about 130,000
// entries (1 MB) when full.
const (
	poolMinShift = 6
	poolMaxShift = 15
	poolDepth    = 2
)

// placedTable is an array placed in unwind_tables at number table, empty.
type placedTable struct {
	m     *ebpf.Map
	table uint32
}

// unwindPool holds the arrays placed ahead, by the power of two of their
// size. t.poolMu guards it.
type unwindPool struct {
	ready   [poolMaxShift + 1][]placedTable
	filling [poolMaxShift + 1]int
	closed  bool
}

// poolClass is the power of two of the pooled array a table of n entries
// takes, or -1 for a table placed as it comes.
func poolClass(n uint32) int {
	if n == 0 || n > 1<<poolMaxShift {
		return -1
	}
	return max(bits.Len32(n-1), poolMinShift)
}

// fillPool places the arrays the pool lacks, each in a goroutine of its
// own: the grace periods they wait for overlap.
func (t *unwindTables) fillPool() {
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	if t.pool.closed {
		return
	}
	for c := poolMinShift; c <= poolMaxShift; c++ {
		for len(t.pool.ready[c])+t.pool.filling[c] < poolDepth {
			table, ok := t.reserve(1 << c)
			if !ok {
				return
			}
			t.pool.filling[c]++
			t.poolWG.Add(1)
			go t.place(c, table)
		}
	}
}

// place makes an array of 1 << class entries and places it at number
// table, for the pool.
func (t *unwindTables) place(class int, table uint32) {
	defer t.poolWG.Done()
	m, err := t.newArray(1 << class)
	if err == nil {
		if err = t.tables.Put(table, m); err != nil {
			m.Close()
		}
	}
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	t.pool.filling[class]--
	switch {
	case err != nil:
		// Its room and number stay unused; the pool goes without.
	case t.pool.closed:
		m.Close()
	default:
		t.pool.ready[class] = append(t.pool.ready[class], placedTable{m, table})
	}
}

// takePooled returns an array placed ahead that holds n entries, from the
// smallest class that has one, at most twice the size n needs, and has the
// pool made up again; false when none is ready.
func (t *unwindTables) takePooled(n uint32) (placedTable, bool) {
	c := poolClass(n)
	if c < 0 {
		return placedTable{}, false
	}
	t.poolMu.Lock()
	var pt placedTable
	ok := false
	for k := c; k <= min(c+1, poolMaxShift) && !ok; k++ {
		if r := t.pool.ready[k]; len(r) > 0 {
			pt, t.pool.ready[k], ok = r[len(r)-1], r[:len(r)-1], true
		}
	}
	t.poolMu.Unlock()
	if ok {
		t.fillPool()
	}
	return pt, ok
}

// closePool waits for the arrays being placed and lets go of the pool's.
func (t *unwindTables) closePool() {
	t.poolMu.Lock()
	t.pool.closed = true
	t.poolMu.Unlock()
	t.poolWG.Wait()
	t.poolMu.Lock()
	defer t.poolMu.Unlock()
	for c := range t.pool.ready {
		for _, pt := range t.pool.ready[c] {
			pt.m.Close()
		}
		t.pool.ready[c] = nil
	}
}
