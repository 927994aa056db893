//go:build linux

package tracer

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/stacks"
)

// ShimSampleBytes returns the sampling interval of the shim in file, as
// process pid has it mapped (abi.SymbolSampleBytes): 0 when the shim
// reports every call to its sites, N when it samples one allocation every
// N bytes by itself (a command launched by another mdtrace with
// --sample-bytes N). The calls at the sites of such a process are a sample
// already. file must be the shim (HasShimSites).
func ShimSampleBytes(pid int, file stacks.File) (uint64, error) {
	addr, err := shimSymbol(pid, file.Path, abi.SymbolSampleBytes)
	if err != nil {
		return 0, err
	}
	if addr == 0 {
		return 0, fmt.Errorf("process %d does not map %s", pid, file.Name)
	}
	var b [8]byte
	if !readMem(pid, addr, b[:]) {
		return 0, fmt.Errorf("process %d: the sampling interval of %s could not be read (the process is gone?)", pid, file.Name)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// ShimSamples tells the probes whether the shim of process pid samples by
// itself: they then take every call at its sites, which are a sample
// already, instead of sampling them again.
func (p *Probes) ShimSamples(pid int, on bool) error {
	var err error
	if on {
		err = p.objs.ShimSamples.Put(uint32(pid), uint32(1))
	} else if err = p.objs.ShimSamples.Delete(uint32(pid)); errors.Is(err, ebpf.ErrKeyNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	return nil
}
