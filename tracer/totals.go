//go:build linux

package tracer

import (
	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// Totals are the live blocks and bytes of one process in the table.
type Totals struct {
	Blocks, Bytes uint64
}

// Totals sums the live table per process.
func (p *Probes) Totals() (map[int]Totals, error) {
	out := map[int]Totals{}
	current, err := p.currentGens()
	if err != nil {
		return nil, err
	}
	err = p.eachAlloc(func(key *bpf.MdtraceAllocKey, info *bpf.MdtraceAllocInfo) {
		if !current(key) {
			return
		}
		t := out[int(key.Tgid)]
		t.Blocks++
		t.Bytes += info.Size &^ abi.AllocZygote
		out[int(key.Tgid)] = t
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
