//go:build linux

package tracer

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/abi"
)

// SetShimBacktrace tells the shim in process pid whether backtraces are on
// (backtrace_enable_on_signal), in the byte it reads at each batched
// allocation (abi.SymbolBacktraceState), so that a toggle takes effect at
// the process's next allocation rather than at its next hand-over of a
// batch. shim is the shim's file, as mdtrace preloaded it. A process that
// does not map the shim, or is gone, is left alone.
func SetShimBacktrace(pid int, shim string, on bool) error {
	at, err := shimSymbol(pid, shim, abi.SymbolBacktraceState)
	if errors.Is(err, ErrProcessGone) || err == nil && at == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	v := byte(abi.BacktraceStateOff)
	if on {
		v = abi.BacktraceStateOn
	}
	if err := writeMem(pid, at, []byte{v}); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("process %d: telling the shim backtraces are %s: %w", pid, map[bool]string{true: "on", false: "off"}[on], err)
	}
	return nil
}

// CheckShimInterface refuses the shim at path unless it was built for
// mdtrace's interface (abi.ShimInterface, read from the file's constant
// abi.SymbolInterface): a shim of another build may take other arguments,
// and fail or be misread in the traced process.
func CheckShimInterface(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	syms, err := dynamicSymbols(f, abi.SymbolInterface)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, sym := range syms {
		if sym.Name != abi.SymbolInterface || sym.Section == elf.SHN_UNDEF || int(sym.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[sym.Section]
		var b [4]byte
		if sym.Value < sec.Addr || sec.Type == elf.SHT_NOBITS {
			break
		}
		if _, err := sec.ReadAt(b[:], int64(sym.Value-sec.Addr)); err != nil {
			return fmt.Errorf("%s: reading its interface: %w", path, err)
		}
		if n := binary.LittleEndian.Uint32(b[:]); n != abi.ShimInterface {
			return fmt.Errorf("%s is another build's shim (its interface %d, this mdtrace's %d): install mdtrace and its shim together, or give --shim", path, n, abi.ShimInterface)
		}
		return nil
	}
	return fmt.Errorf("%s is an older build's shim (it says no interface; this mdtrace's is %d): install mdtrace and its shim together, or give --shim", path, abi.ShimInterface)
}

// symbolAddress returns the address of the dynamic symbol name of the
// shared object at path, from where its first segment is mapped.
func symbolAddress(path, name string) (uint64, error) {
	v, _, err := fromFile(symbolCache, path, func(id fileID) symbolKey { return symbolKey{id, name} }, func() (uint64, error) { return readSymbolAddress(path, name) })
	return v, err
}

// symbolCache remembers symbolAddress's answers by file and name: an
// injection looks up a dozen symbols of the C library and the shim.
var symbolCache = newMemo[symbolKey, uint64](1024)

type symbolKey struct {
	id   fileID
	name string
}

// firstLoadAddress is the lowest address of f's loadable segments, where
// its base in a process maps: offsets in the process are from there.
func firstLoadAddress(f *elf.File) uint64 {
	first := ^uint64(0)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr < first {
			first = p.Vaddr
		}
	}
	return first
}

func readSymbolAddress(path, name string) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	syms, err := dynamicSymbols(f, name)
	if err != nil {
		return 0, err
	}
	first := firstLoadAddress(f)
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			return s.Value - first, nil
		}
	}
	return 0, fmt.Errorf("no symbol %s", name)
}
