//go:build linux

package tracer

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"strings"
)

// errNoGNUHash means a file has no GNU hash table of its dynamic symbols
// (or not one this reader takes): its symbols are then read in full.
var errNoGNUHash = errors.New("no GNU hash table")

// gnuHash is the hash function of the GNU hash table.
func gnuHash(name string) uint32 {
	h := uint32(5381)
	for i := 0; i < len(name); i++ {
		h = h*33 + uint32(name[i])
	}
	return h
}

// lookupDynamic returns the dynamic symbols of ef named name (without a
// version), found through the file's GNU hash table as the dynamic loader
// finds them: a few reads, where reading every dynamic symbol of a program
// that exports tens of thousands (gcc's cc1plus: 31,000) takes tens of
// milliseconds. It returns errNoGNUHash when the file has no such table.
func lookupDynamic(ef *elf.File, name string) ([]elf.Symbol, error) {
	if ef.Class != elf.ELFCLASS64 {
		return nil, errNoGNUHash
	}
	hs, ds := ef.Section(".gnu.hash"), ef.Section(".dynsym")
	if hs == nil || ds == nil || ds.Link == 0 || int(ds.Link) >= len(ef.Sections) || hs.Type == elf.SHT_NOBITS {
		return nil, errNoGNUHash
	}
	strs := ef.Sections[ds.Link]
	bo := ef.ByteOrder
	var head [16]byte
	if _, err := hs.ReadAt(head[:], 0); err != nil {
		return nil, errNoGNUHash
	}
	nbuckets, symoff := bo.Uint32(head[0:]), bo.Uint32(head[4:])
	bloomSize, bloomShift := bo.Uint32(head[8:]), bo.Uint32(head[12:])
	if nbuckets == 0 || bloomSize == 0 || bloomSize > 1<<24 {
		return nil, errNoGNUHash
	}
	h := gnuHash(name)
	var w [8]byte
	bloomAt := int64(16) + 8*int64((h/64)%bloomSize)
	if _, err := hs.ReadAt(w[:], bloomAt); err != nil {
		return nil, errNoGNUHash
	}
	mask := uint64(1)<<(h%64) | uint64(1)<<((h>>bloomShift)%64)
	if bo.Uint64(w[:])&mask != mask {
		return nil, nil
	}
	buckets := int64(16) + 8*int64(bloomSize)
	chains := buckets + 4*int64(nbuckets)
	if _, err := hs.ReadAt(w[:4], buckets+4*int64(h%nbuckets)); err != nil {
		return nil, errNoGNUHash
	}
	idx := bo.Uint32(w[:4])
	if idx == 0 {
		return nil, nil
	}
	if idx < symoff {
		return nil, errNoGNUHash
	}
	var out []elf.Symbol
	nameBuf := make([]byte, len(name)+1)
	for n := 0; ; idx, n = idx+1, n+1 {
		if n > 1<<20 {
			// A chain without its last mark: not a table to trust.
			return nil, errNoGNUHash
		}
		if _, err := hs.ReadAt(w[:4], chains+4*int64(idx-symoff)); err != nil {
			return nil, errNoGNUHash
		}
		ch := bo.Uint32(w[:4])
		if ch|1 == h|1 {
			s, ok := readSym64(ds, strs, bo, idx, nameBuf, name)
			if ok {
				out = append(out, s)
			}
		}
		if ch&1 != 0 {
			return out, nil
		}
	}
}

// readSym64 reads the dynamic symbol idx, and reports whether its name is
// name (nameBuf has room for the name and its NUL).
func readSym64(ds, strs *elf.Section, bo binary.ByteOrder, idx uint32, nameBuf []byte, name string) (elf.Symbol, bool) {
	var e [24]byte
	if _, err := ds.ReadAt(e[:], 24*int64(idx)); err != nil {
		return elf.Symbol{}, false
	}
	if _, err := strs.ReadAt(nameBuf, int64(bo.Uint32(e[0:]))); err != nil {
		return elf.Symbol{}, false
	}
	if nameBuf[len(name)] != 0 || !bytes.Equal(nameBuf[:len(name)], []byte(name)) {
		return elf.Symbol{}, false
	}
	return elf.Symbol{
		Name:    name,
		Info:    e[4],
		Other:   e[5],
		Section: elf.SectionIndex(bo.Uint16(e[6:])),
		Value:   bo.Uint64(e[8:]),
		Size:    bo.Uint64(e[16:]),
	}, true
}

// dynamicSymbols returns the dynamic symbols of ef named name: through the
// GNU hash table, or by reading them all where the file has none.
func dynamicSymbols(ef *elf.File, name string) ([]elf.Symbol, error) {
	syms, err := lookupDynamic(ef, name)
	if !errors.Is(err, errNoGNUHash) {
		return syms, err
	}
	all, err := ef.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	for _, s := range all {
		if base, _, _ := strings.Cut(s.Name, "@"); base == name {
			syms = append(syms, s)
		}
	}
	return syms, nil
}
