//go:build linux

package tracer

import (
	"math"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/leak"
)

// Totals are the live blocks and bytes of one process in the table: while
// the probes sample, estimates (each block weighed as leak.SampleWeight
// says), and Sampled the blocks in the table.
type Totals struct {
	Blocks, Bytes uint64
	Sampled       uint64
}

// Totals sums the live table per process.
func (p *Probes) Totals() (map[int]Totals, error) {
	type sums struct {
		blocks, bytes float64
		n             uint64
	}
	acc := map[int]*sums{}
	current, err := p.currentGens()
	if err != nil {
		return nil, err
	}
	err = p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
		if !current(key) {
			return
		}
		t := acc[int(key.Tgid)]
		if t == nil {
			t = &sums{}
			acc[int(key.Tgid)] = t
		}
		size := info.Size &^ abi.AllocZygote
		w := leak.SampleWeight(size, p.sampleBytes)
		t.n++
		t.blocks += w
		t.bytes += w * float64(size)
	})
	if err != nil {
		return nil, err
	}
	out := make(map[int]Totals, len(acc))
	for pid, t := range acc {
		out[pid] = Totals{Blocks: uint64(math.Round(t.blocks)), Bytes: uint64(math.Round(t.bytes)), Sampled: t.n}
	}
	return out, nil
}
