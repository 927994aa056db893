//go:build linux

package tracer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mdtrace/mdtrace/stacks"
)

// atBase is the auxiliary vector's entry for the address the kernel
// mapped the program's dynamic loader at.
const atBase = 7

// readLoaderBase returns where the dynamic loader of process pid is mapped
// (AT_BASE), 0 for a static program.
func readLoaderBase(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	if err != nil {
		return 0, procErr(pid, err)
	}
	for i := 0; i+16 <= len(b); i += 16 {
		if binary.LittleEndian.Uint64(b[i:]) == atBase {
			return binary.LittleEndian.Uint64(b[i+8:]), nil
		}
	}
	return 0, nil
}

// linkEntry is one entry of the loader's list of loaded objects (struct
// link_map), in the process's memory.
type linkEntry struct {
	name string // l_name: "" for the executable, the path the loader opened otherwise
	addr uint64 // l_addr, the load bias
	ld   uint64 // l_ld, the address of the object's dynamic section
}

// maxLinkEntries bounds the walk of a list that a process could have
// corrupted into a loop.
const maxLinkEntries = 1 << 14

// errNoLinkMap means the loader has not made its list yet: the process is
// stopped before the loader ran (launch mode, or a process attached at its
// exec).
var errNoLinkMap = errors.New("the loader's list of libraries is not made yet")

// readLinkMap reads the loader's list of objects of process pid from its
// memory, from _r_debug at rd: the executable, the preloaded libraries,
// the libraries they need in the order the loader loaded them (the order
// in which it looks symbols up), then those opened since. consistent is
// false when the loader was changing the list (r_state not RT_CONSISTENT,
// a dlopen or dlclose under way): the entries it adds may be incomplete.
func readLinkMap(pid int, rd uint64) (_ []linkEntry, consistent bool, err error) {
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, false, procErr(pid, err)
	}
	defer mem.Close()
	word := func(addr uint64) (uint64, error) {
		var b [8]byte
		if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
			return 0, fmt.Errorf("reading process %d's memory at %#x: %w", pid, addr, err)
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	// struct r_debug: int r_version; struct link_map *r_map (8);
	// r_brk (16); int r_state (24).
	version, err := word(rd)
	if err != nil {
		return nil, false, err
	}
	lm, err := word(rd + 8)
	if err != nil {
		return nil, false, err
	}
	if uint32(version) == 0 || lm == 0 {
		return nil, false, errNoLinkMap
	}
	state, err := word(rd + 24)
	if err != nil {
		return nil, false, err
	}
	var out []linkEntry
	for lm != 0 {
		if len(out) == maxLinkEntries {
			return nil, false, fmt.Errorf("process %d: the loader's list of libraries has more than %d entries", pid, maxLinkEntries)
		}
		// struct link_map: l_addr, l_name, l_ld, l_next, l_prev.
		var b [32]byte
		if _, err := mem.ReadAt(b[:], int64(lm)); err != nil {
			return nil, false, fmt.Errorf("reading process %d's list of libraries at %#x: %w", pid, lm, err)
		}
		e := linkEntry{addr: binary.LittleEndian.Uint64(b[0:]), ld: binary.LittleEndian.Uint64(b[16:])}
		if name := binary.LittleEndian.Uint64(b[8:]); name != 0 {
			e.name = readCString(mem, name)
		}
		out = append(out, e)
		lm = binary.LittleEndian.Uint64(b[24:])
	}
	return out, uint32(state) == rtConsistent, nil
}

// rtConsistent is r_state's value while the loader does not change its
// list.
const rtConsistent = 0

// linkMapTries bounds the reads of a list the loader is changing.
const linkMapTries = 50

// readCString reads a NUL-terminated string of at most 4096 bytes at addr
// of a process's memory.
func readCString(mem *os.File, addr uint64) string {
	var b [4096]byte
	n, _ := mem.ReadAt(b[:], int64(addr))
	if i := bytes.IndexByte(b[:n], 0); i >= 0 {
		return string(b[:i])
	}
	return string(b[:n])
}

// linkedFiles returns the objects the loader of process pid has loaded,
// past the executable and in its order, each as the file it maps: the
// mapping that holds the object's dynamic section says which file it is,
// however the loader named it (a symbolic link, a path in another mount
// namespace, a file deleted since). The vdso, which has no file, is left
// out. An object whose file cannot be told has no Path. loader is the
// process's loader (LoaderOf).
func linkedFiles(pid int, loader stacks.File, maps *stacks.Maps) ([]stacks.File, error) {
	rd, err := rDebugAddress(pid, loader)
	if err != nil {
		return nil, err
	}
	var (
		entries    []linkEntry
		consistent bool
	)
	for try := 0; ; try++ {
		entries, consistent, err = readLinkMap(pid, rd)
		if err != nil {
			return nil, err
		}
		if consistent || try == linkMapTries {
			break
		}
		// A dlopen or dlclose is under way: it takes microseconds.
		time.Sleep(time.Millisecond)
	}
	var files []stacks.File
	for i, e := range entries {
		if i == 0 || !strings.Contains(e.name, "/") {
			// The executable; the vdso, named without a path.
			continue
		}
		m := maps.Find(e.ld)
		if m == nil || m.Inode == 0 || !strings.HasPrefix(m.Path, "/") {
			if !consistent {
				// An object the loader is adding (or the maps,
				// read before, do not show yet): those loaded
				// before bound malloc already.
				break
			}
			// Without a file to open: an error only if the
			// allocator is looked for this far (definesMalloc).
			files = append(files, stacks.File{Name: e.name})
			continue
		}
		files = append(files, stacks.MappedFile(pid, m))
	}
	return files, nil
}
