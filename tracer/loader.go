//go:build linux

package tracer

import (
	"debug/elf"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/stacks"
)

// loaderHook is the function the dynamic loader calls around every change
// of its list of libraries, for debuggers.
const loaderHook = "_dl_debug_state"

// LoaderOf returns the dynamic loader of process pid, named as its
// program's PT_INTERP names it, and opened where the process maps it (the
// auxiliary vector's AT_BASE), or by its path in the process's root if it
// is not mapped; a zero File for a static program.
func LoaderOf(pid int) (stacks.File, error) {
	return LoaderIn(pid, nil)
}

// LoaderIn is LoaderOf given the maps of process pid, read already; nil
// has them read when they are needed.
func LoaderIn(pid int, maps *stacks.Maps) (stacks.File, error) {
	exe, err := procExe(pid)
	if err != nil {
		return stacks.File{}, err
	}
	path := fmt.Sprintf("/proc/%d/exe", pid)
	interp, _, err := fromFile(interpCache, path, byID, func() (string, error) { return interpreter(path, exe) })
	if err != nil || interp == "" {
		return stacks.File{}, err
	}
	base, err := loaderBase(pid)
	if err != nil {
		return stacks.File{}, err
	}
	if base != 0 {
		if maps == nil {
			if maps, err = stacks.ReadMaps(pid); err != nil {
				return stacks.File{}, procErr(pid, err)
			}
		}
		if m := maps.Find(base); m != nil && m.Inode != 0 && strings.HasPrefix(m.Path, "/") {
			// Named as the program names it, as the loader names
			// itself in its list of libraries.
			return stacks.File{Name: interp, Path: stacks.MappedFile(pid, m).Path}, nil
		}
	}
	return stacks.ResolveFile(pid, interp)
}

// interpCache remembers programs' loaders by file: every child of a shell
// runs one of a few programs.
var interpCache = newMemo[fileID, string](1024)

// interpreter returns the PT_INTERP of the ELF file at path, or "" for a
// static program; name is the file's name in errors.
func interpreter(path, name string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", fmt.Errorf("reading the interpreter of %s: %w", name, err)
			}
			return strings.TrimRight(string(b), "\x00"), nil
		}
	}
	return "", nil
}

// WatchLibraries probes the loader's debugger hook in process pid, so that
// LibraryNotices reports the process's libraries, with their load
// addresses, after every dlopen and dlclose (and the first loading). The
// loader must be mapped already. Called again after an exec, it only
// points the probe at the new image's list when the loader is the same.
func (p *Probes) WatchLibraries(pid int, loader stacks.File) error {
	off, err := FuncOffset(loader.Path, loaderHook)
	if err != nil {
		return fmt.Errorf("%s: %w", loader.Name, err)
	}
	rd, err := rDebugAddress(pid, loader)
	if err != nil {
		return err
	}
	if err := p.objs.Rdebug.Put(uint32(pid), rd); err != nil {
		return fmt.Errorf("setting the loader's list of process %d: %w", pid, err)
	}
	p.mu.Lock()
	watched := p.watched[pid][loader.Name]
	p.mu.Unlock()
	if watched {
		return nil
	}
	ex, err := link.OpenExecutable(loader.Path)
	if err != nil {
		return fmt.Errorf("opening %s: %w", loader, err)
	}
	var l link.Link
	if p.multi {
		l, err = ex.UprobeMulti(nil, p.objs.LibrariesChanged, &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: uint32(pid)})
	} else {
		l, err = ex.Uprobe(loaderHook, p.objs.LibrariesChanged, &link.UprobeOptions{Address: off, PID: pid})
	}
	if err != nil {
		return fmt.Errorf("probing %s in %s: %w", loaderHook, loader, err)
	}
	p.mu.Lock()
	p.links[pid] = append(p.links[pid], l)
	if p.watched[pid] == nil {
		p.watched[pid] = map[string]bool{}
	}
	p.watched[pid][loader.Name] = true
	p.mu.Unlock()
	return nil
}

// rDebugAddress returns the address of the loader's r_debug (the head of
// its list of libraries) in process pid: where the kernel mapped the
// loader (AT_BASE), plus the symbol's address in the file.
func rDebugAddress(pid int, loader stacks.File) (uint64, error) {
	rd, _, err := fromFile(rDebugCache, loader.Path, byID, func() (rDebug, error) { return readRDebug(loader) })
	if err != nil {
		return 0, err
	}
	base, err := loaderBase(pid)
	if err != nil {
		return 0, err
	}
	if base == 0 {
		return 0, fmt.Errorf("process %d has no dynamic loader mapped", pid)
	}
	return base + rd.value, nil
}

// rDebug is where a loader keeps _r_debug: its address in the file.
type rDebug struct {
	value uint64
}

// rDebugCache remembers readRDebug's answers by loader file.
var rDebugCache = newMemo[fileID, rDebug](64)

// readRDebug reads where the loader at path keeps _r_debug.
func readRDebug(loader stacks.File) (rDebug, error) {
	f, err := elf.Open(loader.Path)
	if err != nil {
		return rDebug{}, fmt.Errorf("reading %s: %w", loader, err)
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	var rd rDebug
	for _, s := range syms {
		if s.Name == "_r_debug" && s.Section != elf.SHN_UNDEF {
			rd.value = s.Value
		}
	}
	if rd.value == 0 {
		return rDebug{}, fmt.Errorf("%s has no _r_debug", loader)
	}
	return rd, nil
}

// Library is one entry of a process's list of loaded libraries.
type Library struct {
	PID  int
	Base uint64 // the load bias (l_addr)
	Path string // "" for the executable
}

// NoticeReader reads the lists of libraries that processes report.
type NoticeReader struct {
	r  *EventReader[bpf.MdtraceLibEvent]
	ev bpf.MdtraceLibEvent
}

// LibraryNotices opens the reader of library notices.
func (p *Probes) LibraryNotices() (*NoticeReader, error) {
	r, err := newEventReader[bpf.MdtraceLibEvent](p.objs.Notify, "notice")
	if err != nil {
		return nil, err
	}
	return &NoticeReader{r: r}, nil
}

// Next returns the next library, waiting until deadline at the most
// (ErrNoRecord when none came; os.ErrClosed once closed).
func (n *NoticeReader) Next(deadline time.Time) (Library, error) {
	if err := n.r.Next(deadline, &n.ev); err != nil {
		return Library{}, err
	}
	return Library{PID: int(n.ev.Tgid), Base: n.ev.Base, Path: cString(n.ev.Name[:])}, nil
}

// Close stops the reader.
func (n *NoticeReader) Close() error { return n.r.Close() }

// Wake ends a wait of Next (see EventReader.Wake).
func (n *NoticeReader) Wake() error { return n.r.Wake() }
