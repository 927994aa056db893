//go:build linux

package tracer

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/stacks"
)

// entryPoint is one allocator function and how it is traced.
type entryPoint struct {
	symbol   string
	call     uint64 // the entry probe's cookie
	ret      bool   // also a return probe
	required bool   // attaching fails without it
	args     int    // its arguments, which the entry probe reads
}

// use is what the entry probe of ep reads (see probePoint): free's and
// operator delete's ignore a null pointer. With verify, the pointers it
// checks must reach it before the function reads through them.
func (ep entryPoint) use(verify bool) entryUse {
	return entryUse{
		args:        ep.args,
		nullSkipped: ep.call == abi.CallFree || ep.call == abi.CallDelete,
		noDeref:     verify,
		stackMoves:  ep.call == abi.CallRuntimeNew,
	}
}

// name is how mdtrace names ep to the user: a C++ operator by its C++ name.
func (ep entryPoint) name() string {
	switch {
	case strings.HasPrefix(ep.symbol, "_Znw"):
		return "operator new"
	case strings.HasPrefix(ep.symbol, "_Zna"):
		return "operator new[]"
	case strings.HasPrefix(ep.symbol, "_Zdl"):
		return "operator delete"
	case strings.HasPrefix(ep.symbol, "_Zda"):
		return "operator delete[]"
	}
	return ep.symbol
}

// entryPoints are the allocator's functions. Functions exported at one
// address (memalign and aligned_alloc in glibc 2.36) are probed once.
var entryPoints = []entryPoint{
	{"malloc", abi.CallMalloc, true, true, 1},
	{"free", abi.CallFree, false, true, 1},
	{"calloc", abi.CallCalloc, true, true, 2},
	{"realloc", abi.CallRealloc, true, true, 2},
	{"reallocarray", abi.CallReallocarray, true, false, 3},
	{"posix_memalign", abi.CallPosixMemalign, true, false, 3},
	{"memalign", abi.CallMemalign, true, false, 2},
	{"aligned_alloc", abi.CallMemalign, true, false, 2},
	{"valloc", abi.CallValloc, true, false, 1},
	{"pvalloc", abi.CallPvalloc, true, false, 1},
	{"malloc_usable_size", abi.CallUsableSize, false, false, 1},
	// With verify, where a thread's end begins: glibc then frees its
	// thread cache through free (see thread_cache_free in the BPF).
	{"__call_tls_dtors", abi.CallThreadEnd, false, false, 0},
	// C++'s operators, where the allocator defines its own (jemalloc,
	// tcmalloc) and they need not call malloc or free. Blocks are
	// counted once however they call each other or malloc and free: an
	// operator delete has a return probe, so that a free inside it is
	// seen to be nested. The sized and nothrow forms take more arguments.
	{"_Znwm", abi.CallMalloc, true, false, 1},
	{"_Znam", abi.CallMalloc, true, false, 1},
	{"_ZnwmRKSt9nothrow_t", abi.CallMalloc, true, false, 2},
	{"_ZnamRKSt9nothrow_t", abi.CallMalloc, true, false, 2},
	{"_ZnwmSt11align_val_t", abi.CallNewAligned, true, false, 2},
	{"_ZnamSt11align_val_t", abi.CallNewAligned, true, false, 2},
	{"_ZnwmSt11align_val_tRKSt9nothrow_t", abi.CallNewAligned, true, false, 3},
	{"_ZnamSt11align_val_tRKSt9nothrow_t", abi.CallNewAligned, true, false, 3},
	{"_ZdlPv", abi.CallDelete, true, false, 1},
	{"_ZdaPv", abi.CallDelete, true, false, 1},
	{"_ZdlPvm", abi.CallDelete, true, false, 2},
	{"_ZdaPvm", abi.CallDelete, true, false, 2},
	{"_ZdlPvRKSt9nothrow_t", abi.CallDelete, true, false, 2},
	{"_ZdaPvRKSt9nothrow_t", abi.CallDelete, true, false, 2},
	{"_ZdlPvSt11align_val_t", abi.CallDelete, true, false, 2},
	{"_ZdaPvSt11align_val_t", abi.CallDelete, true, false, 2},
	{"_ZdlPvmSt11align_val_t", abi.CallDelete, true, false, 3},
	{"_ZdaPvmSt11align_val_t", abi.CallDelete, true, false, 3},
	{"_ZdlPvSt11align_val_tRKSt9nothrow_t", abi.CallDelete, true, false, 3},
	{"_ZdaPvSt11align_val_tRKSt9nothrow_t", abi.CallDelete, true, false, 3},
}

// runtimeNews are the forms of operator new probed in a C++ runtime that
// gets its memory from another file's malloc (glibc's libstdc++), for
// backtraces only: its operator new keeps no frame pointer, so the
// backtrace taken where malloc returns into it misses the function that
// called new. An entry probe notes new's return address and frame pointer,
// and the allocation call inside new starts its backtrace from them. Its
// deletes only call free.
var runtimeNews = func() []entryPoint {
	var out []entryPoint
	for _, ep := range entryPoints {
		if strings.HasPrefix(ep.symbol, "_Zn") {
			out = append(out, entryPoint{ep.symbol, abi.CallRuntimeNew, false, false, ep.args})
		}
	}
	return out
}()

// probedHere reports whether Attach probes the function name of a file
// with the functions offsets as an allocator.
func probedHere(name string, offsets map[string]funcSym) bool {
	_, defined := offsets[name]
	return defined && slices.ContainsFunc(entryPoints, func(ep entryPoint) bool { return ep.symbol == name })
}

// IsCxxRuntime reports whether the file f is a C++ runtime library that
// defines operator new (libstdc++, libc++, or libc++abi where libc++
// leaves new to it), whose news Attach probes for backtraces (see
// runtimeNews). The shim's hand-over (shim/cxx.c) knows the same names.
func IsCxxRuntime(f stacks.File) bool {
	return MaybeCxxRuntime(f.Name) && DefinesNew(f.Path)
}

// MaybeCxxRuntime reports whether the file named name could be a C++
// runtime library by its name alone (see IsCxxRuntime).
func MaybeCxxRuntime(name string) bool {
	base := filepath.Base(name)
	return strings.HasPrefix(base, "libstdc++.so") || strings.HasPrefix(base, "libc++.so") ||
		strings.HasPrefix(base, "libc++abi.so")
}

// DefinesNew reports whether the ELF file at path defines C++'s operator
// new, as the shim, jemalloc and tcmalloc do.
func DefinesNew(path string) bool {
	offsets, err := funcOffsets(path)
	_, ok := offsets["_Znwm"]
	return err == nil && ok
}

// shimSites are the probe sites of the shim (shim/site.c): functions that
// start with a 5-byte NOP, which the kernel probes without a trap, and that
// the shim calls with a call's result and arguments. Where a library has
// them, they replace every entry and return probe.
var shimSites = []entryPoint{
	{"mdshim_site_alloc", abi.SiteAlloc, false, true, 5},
	{"mdshim_site_free", abi.SiteFree, false, true, 2},
	{"mdshim_site_batch", abi.SiteBatch, false, false, 4},
}

// hasShimSites reports whether a library's functions include the shim's
// probe sites.
func hasShimSites(offsets map[string]funcSym) bool {
	for _, ep := range shimSites {
		if _, ok := offsets[ep.symbol]; !ok && ep.required {
			return false
		}
	}
	return true
}

// HasShimSites reports whether the ELF file at path has the shim's probe
// sites: it is mdtrace's shim.
func HasShimSites(path string) bool {
	offsets, err := funcOffsets(path)
	return err == nil && hasShimSites(offsets)
}

// funcSym is a function of an ELF file: its file offset, as uprobes take
// it, and its size.
type funcSym struct {
	off, size uint64
}

// funcOffsets returns the defined functions of an ELF file, from .dynsym
// and .symtab. The answer is remembered for the file as it is (its
// identity, size and times): every process of a build maps the same libc.
// Callers must not modify it.
func funcOffsets(path string) (map[string]funcSym, error) {
	offs, _, err := fromFile(funcCache, path, byID, func() (map[string]funcSym, error) {
		fh, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		defer fh.Close()
		return readFuncOffsets(fh, path)
	})
	return offs, err
}

// funcNamed returns the function symbol of the ELF file at path.
func funcNamed(path, symbol string) (funcSym, error) {
	offs, err := funcOffsets(path)
	if err != nil {
		return funcSym{}, err
	}
	fs, ok := offs[symbol]
	if !ok {
		return funcSym{}, fmt.Errorf("%s has no %s", path, symbol)
	}
	return fs, nil
}

// readFuncOffsets reads the defined functions of the ELF file in fh. A
// malformed file is an error: debug/elf's panics are recovered.
func readFuncOffsets(fh *os.File, path string) (_ map[string]funcSym, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("reading %s: malformed ELF file: %v", path, p)
		}
	}()
	f, err := elf.NewFile(fh)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s is not an x86-64 ELF file: %w", path, ErrNot64Bit)
	}
	syms, _ := f.DynamicSymbols()
	st, _ := f.Symbols()
	syms = append(syms, st...)
	out := map[string]funcSym{}
	for _, s := range syms {
		name, ok := definedFunc(s)
		if !ok {
			continue
		}
		if _, ok := out[name]; ok {
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_LOAD && prog.Flags&elf.PF_X != 0 &&
				prog.Vaddr <= s.Value && s.Value < prog.Vaddr+prog.Memsz {
				out[name] = funcSym{s.Value - prog.Vaddr + prog.Off, s.Size}
				break
			}
		}
	}
	return out, nil
}

// definedFunc returns the name, without its version, of a function an ELF
// file defines; ok is false for other symbols.
func definedFunc(s elf.Symbol) (name string, ok bool) {
	t := elf.ST_TYPE(s.Info)
	if (t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC) || s.Section == elf.SHN_UNDEF || s.Value == 0 {
		return "", false
	}
	name, _, _ = strings.Cut(s.Name, "@")
	return name, true
}
