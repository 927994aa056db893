//go:build linux

package tracer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/bpf"
)

// allocBatch is how many entries of the live table one system call reads.
var allocBatch = 4096

// eachAlloc calls fn with every entry of the live table, the newest tier
// first. A block goes into the newest tier, and an address freed and
// allocated again during the walk goes from an older tier to the newest:
// walked in this order, it is seen once or, like an entry of a single hash
// map freed and added again in a bucket the walk has passed, not at all,
// never twice. A tier the kernel counts empty is not read: a walk reads
// every bucket, 0.6 ms for an empty tier of 1M blocks' room against 20 us
// for the count, and the next tier, made ahead of need, is empty until the
// probes move on to it. fn must not keep its arguments.
func (p *Probes) eachAlloc(fn func(*bpf.MdtraceAllocKey, *bpf.MdtraceAllocInfo)) error {
	tiers := p.tables.nonEmpty()
	for i := len(tiers) - 1; i >= 0; i-- {
		if err := eachAllocIn(tiers[i], fn); err != nil {
			return err
		}
	}
	return nil
}

// eachAllocIn calls fn with every entry of a tier of the live table. It
// reads the tier a batch at a time (BPF_MAP_LOOKUP_BATCH), one system call for allocBatch
// entries instead of two per entry for a walk key by key. While the probes
// change the table, it sees each entry at most once: the kernel's cursor is
// a hash bucket, where a walk key by key starts over from the first key
// when the key it stands on is freed. fn must not keep its arguments.
func eachAllocIn(m *ebpf.Map, fn func(*bpf.MdtraceAllocKey, *bpf.MdtraceAllocInfo)) error {
	n := allocBatch
	keys := make([]bpf.MdtraceAllocKey, n)
	infos := make([]bpf.MdtraceAllocInfo, n)
	var cursor ebpf.MapBatchCursor
	for {
		got, err := m.BatchLookup(&cursor, keys, infos, nil)
		if errors.Is(err, unix.ENOSPC) {
			// A hash bucket holds more entries than a batch: the
			// cursor stays on it, read it with room for twice as many.
			n *= 2
			keys = make([]bpf.MdtraceAllocKey, n)
			infos = make([]bpf.MdtraceAllocInfo, n)
			continue
		}
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("reading the live table: %w", err)
		}
		for i := range got {
			fn(&keys[i], &infos[i])
		}
		if err != nil {
			// ErrKeyNotExist: the last batch.
			return nil
		}
	}
}
