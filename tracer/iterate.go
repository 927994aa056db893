//go:build linux

package tracer

import (
	"github.com/mdtrace/mdtrace/bpf"
)

// eachAlloc calls fn with every entry of the live table, the newest tier
// first. It reads the tiers in mdtrace's memory, without a system call. A
// block goes into the newest tier, and an address freed and allocated
// again during the walk goes from an older tier to the newest: walked in
// this order, it is seen once or not at all. Within a tier a block freed
// and allocated again goes into the emptier of its two buckets, which may
// be the one the walk reads second: seen twice, once before its free and
// once after, only if it changed buckets in the microsecond between the
// walk's reads of the two. A tier the counts say is empty is not read: the
// next tier, made ahead of need, is empty until the probes move on to it.
// fn must not keep its arguments.
func (p *Probes) eachAlloc(fn func(*bpf.MdtraceAllocKey, *bpf.MdtraceAllocInfo)) error {
	p.tables.mem.RLock()
	defer p.tables.mem.RUnlock()
	tiers := p.tables.nonEmpty()
	for i := len(tiers) - 1; i >= 0; i-- {
		tiers[i].each(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo, _ *bpf.MdtraceBucket, _ int) {
			fn(key, info)
		})
	}
	return nil
}
