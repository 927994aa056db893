//go:build linux

package tracer

import (
	"fmt"

	"github.com/mdtrace/mdtrace/bpf"
)

// Totals are the live blocks and bytes of one process in the table.
type Totals struct {
	Blocks, Bytes uint64
}

// Totals sums the live table per process.
func (p *Probes) Totals() (map[int]Totals, error) {
	var (
		key  bpf.MdtraceAllocKey
		info bpf.MdtraceAllocInfo
		out  = map[int]Totals{}
	)
	it := p.objs.Allocs.Iterate()
	for it.Next(&key, &info) {
		t := out[int(key.Tgid)]
		t.Blocks++
		t.Bytes += info.Size
		out[int(key.Tgid)] = t
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading the live table: %w", err)
	}
	return out, nil
}
