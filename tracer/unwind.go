//go:build linux

package tracer

import (
	"debug/elf"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/bpf"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/unwind"
)

// DefaultUnwindEntries bounds the entries of the unwind tables of all the
// files traced processes map, 8 bytes an entry: 32 MiB at most, made as
// files are mapped. libc, libstdc++ and Debian's python3.11 take about
// 140,000 (1.1 MB), gcc's cc1plus alone 517,000.
const DefaultUnwindEntries = 1 << 22

// maxUnwindTables is MAX_UNWIND_TABLES in bpf/unwind.h: the files with a
// table, numbered from 1.
const maxUnwindTables = 8192

// maxUnwindMappings is MAX_UNWIND_MAPPINGS in bpf/unwind.h: the executable
// file mappings of a process the walk knows.
const maxUnwindMappings = 128

// Packing of a rule (struct unwind_entry in bpf/unwind.h).
const (
	ruleRSP    = 0
	ruleRBP    = 1
	rulePLT    = 2
	ruleStop   = 3
	ruleSignal = 4
	ruleEnd    = 1 << 3 // why: the outermost frame
)

// packRule packs a rule as the BPF walk reads it; a rule it cannot hold
// becomes a stop.
func packRule(r unwind.Rule) uint32 {
	stop := uint32(ruleStop) | uint32(r.Stop)<<3
	var base uint32
	switch r.Base {
	case unwind.BaseRSP:
		base = ruleRSP
	case unwind.BaseRBP:
		base = ruleRBP
	case unwind.BasePLT:
		return rulePLT | uint32(r.Offset)<<6
	case unwind.BaseSignal:
		// The ucontext's layout is the kernel's: the walk knows it.
		if r.RA != 168 || r.Offset != 160 || r.RBP != 120 {
			return ruleStop | unwind.StopExpression<<3
		}
		return ruleSignal
	default:
		return stop
	}
	if r.Offset < 0 || r.Offset > 0xffff || r.RA != -8 {
		return ruleStop | unwind.StopLargeOffset<<3
	}
	var words uint32
	if r.RBP != 0 {
		if r.RBP > 0 || r.RBP%8 != 0 || -r.RBP/8 > 0xff {
			return ruleStop | unwind.StopLargeOffset<<3
		}
		words = uint32(-r.RBP / 8)
	}
	p := base | uint32(r.Offset)<<6 | words<<22
	if r.Stop == unwind.StopEnd {
		p |= ruleEnd
	}
	return p
}

// unwindTables are the files' tables loaded for the BPF walk, by file.
type unwindTables struct {
	mu     sync.Mutex
	tables *ebpf.Map // unwind_tables: each file's array, by number
	inner  *ebpf.MapSpec
	procs  *ebpf.Map
	named  *ebpf.Map // unwind_files
	exes   *ebpf.Map // unwind_exes
	// notices counts the loader's notices that rewrote each process's
	// list (unwind_notices).
	notices *ebpf.Map
	// room is the most entries all tables may have, used the entries
	// they have, made the number of tables made; lost counts the files
	// whose tables did not fit. acct guards them, for tables made at once
	// (prefetch).
	acct             sync.Mutex
	room, used, made uint32
	lost             int
	// held counts the tables that hold a file's entries.
	held int
	// pool holds arrays placed ahead (unwindpool.go); poolWG waits for
	// those being placed.
	poolMu sync.Mutex
	pool   unwindPool
	poolWG sync.WaitGroup
	files  map[fileID]*unwindFile
	// placed are the names given to the loader's notice, with their file.
	placed map[string]bpf.MdtraceUnwindFile
}

// LoadUnwind gives the stack walk of process pid the unwind tables of the
// files it has mapped executable now, so that its backtraces go through
// code built without frame pointers. A file's table is read once, for
// every process that maps it; a file without call frame information, or
// whose table no longer fits, is walked by frame pointers. Called when a
// process is traced, after each change of its libraries and after an
// exec.
func (p *Probes) LoadUnwind(pid int) error {
	_, err := p.LoadUnwindMaps(pid)
	return err
}

// LoadUnwindMaps is LoadUnwind, and returns the maps of process pid it
// read (read alone where the probes walk no stacks): nil if it read none.
func (p *Probes) LoadUnwindMaps(pid int) (*stacks.Maps, error) {
	return p.loadUnwindMaps(pid, true)
}

// ReloadUnwind is LoadUnwindMaps after the loader's notice that process
// pid loaded or unloaded libraries: the libraries it loads at its start are
// mapped by then, so none is foretold (loadedLibraries, which reads the
// process's environment and the loader's cache), and the table the
// executable has, given at the process's first list, stays.
func (p *Probes) ReloadUnwind(pid int) (*stacks.Maps, error) {
	return p.loadUnwindMaps(pid, false)
}

func (p *Probes) loadUnwindMaps(pid int, foretell bool) (*stacks.Maps, error) {
	if p.unwind == nil || p.stackDepth == 0 {
		return stacks.ReadMaps(pid)
	}
	// The loader's notice may rewrite the list (a library dlopen'ed)
	// between the read of the maps and the write of the list from them,
	// which would take the library out again: then the list is made
	// again, from maps that hold it.
	for try := 0; ; try++ {
		before := p.unwind.noticeCount(pid)
		maps, err := p.loadUnwind(pid, before, foretell)
		if err != nil || p.unwind.noticeCount(pid) == before || try == 3 {
			return maps, err
		}
	}
}

// ShareUnwind gives vfork child the unwind list of its parent, whose
// memory and mappings it runs in until it executes a program or exits:
// without a list, its walks would follow frame pointers alone.
func (p *Probes) ShareUnwind(parent, child int) error {
	if p.unwind == nil || p.stackDepth == 0 {
		return nil
	}
	p.unwind.mu.Lock()
	defer p.unwind.mu.Unlock()
	var up bpf.MdtraceUnwindProc
	if err := p.unwind.procs.Lookup(uint32(parent), &up); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("unwind tables of process %d: %w", parent, err)
	}
	// Its own count of the loader's notices, none yet.
	up.Notices = 0
	if err := p.unwind.procs.Put(uint32(child), &up); err != nil {
		return fmt.Errorf("unwind tables of process %d, vforked from %d: %w", child, parent, err)
	}
	return nil
}

// noticeCount is the number of the loader's notices that rewrote process
// pid's list.
func (t *unwindTables) noticeCount(pid int) uint64 {
	var n uint64
	if t.notices != nil {
		t.notices.Lookup(uint32(pid), &n)
	}
	return n
}

// loadUnwind is LoadUnwind once, with notices the process's count of the
// loader's notices before its maps are read; it returns those maps.
func (p *Probes) loadUnwind(pid int, notices uint64, foretell bool) (*stacks.Maps, error) {
	// Through a living thread if its main thread has ended.
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return nil, procErr(pid, err)
	}
	p.unwind.mu.Lock()
	defer p.unwind.mu.Unlock()
	// The executable mappings and their files, each stat'ed once.
	type mapping struct {
		m    *stacks.Mapping
		file unwindPath
	}
	var mapped []mapping
	var paths []unwindPath
	for i := range maps.Mappings {
		if m := &maps.Mappings[i]; len(m.Perms) >= 3 && m.Perms[2] == 'x' && strings.HasPrefix(m.Path, "/") {
			u := statPath(stacks.MappedFile(pid, m).Path)
			mapped = append(mapped, mapping{m, u})
			paths = append(paths, u)
		}
	}
	var exe unwindPath
	var libs []stacks.File
	var libPaths []unwindPath
	if foretell {
		if name, err := procExe(pid); err == nil {
			id, ok := exeID(pid)
			exe = unwindPath{fmt.Sprintf("/proc/%d/exe", pid), id, ok}
			libs = loadedLibraries(pid, name)
			for _, lib := range libs {
				libPaths = append(libPaths, statPath(lib.Path))
			}
			paths = append(append(paths, exe), libPaths...)
		}
	}
	// Every table this process needs made at once, before they are
	// placed one by one below.
	p.unwind.prefetch(paths)
	// Until the list is written again, a walk that stops in code of no
	// mapping of it is left to mdtrace if a notice came since (may_defer
	// in bpf/stack.h): its library may be mapped, and not in the list.
	up := bpf.MdtraceUnwindProc{Notices: notices}
	n := 0
	for _, mf := range mapped {
		if n == maxUnwindMappings {
			break
		}
		// The file as this process maps it, even deleted, replaced or
		// in another mount namespace.
		m, f := mf.m, p.unwind.fileAt(mf.file)
		e := &up.M[n]
		e.Start, e.End, e.Bias = m.Start, m.End, f.bias(m)
		e.Table, e.Count = f.table, f.count
		if isLoader(m.Path) {
			e.Loader = 1
		}
		p.unwind.register(pid, m.Name(), f)
		n++
	}
	// /proc/PID/maps lists mappings by address, as the walk searches them.
	up.N = uint32(n)
	// The executable, and the libraries the loader will load, for its
	// notice to place at once (launch mode: only the executable and the
	// loader are mapped yet).
	if exe.path != "" {
		p.unwind.register(pid, "", p.unwind.fileAt(exe))
		for i, lib := range libs {
			p.unwind.register(pid, lib.Name, p.unwind.fileAt(libPaths[i]))
		}
	}
	if err := p.unwind.procs.Put(uint32(pid), &up); err != nil {
		return maps, fmt.Errorf("unwind tables of process %d: %w", pid, err)
	}
	return maps, nil
}

// unwindFile is a file's table and what is needed to place it.
type unwindFile struct {
	// table is the number of its table in unwind_tables, count its
	// entries; count is 0 for a file without a table (no call frame
	// information, or no room left).
	table, count uint32
	// textStart and textEnd bound the file's executable segments, as
	// the file gives their addresses.
	textStart, textEnd uint64
	loads              []elf.ProgHeader
	// unread: the file could not be read (the process that maps it
	// exited meanwhile): not kept, to be read again for the next.
	unread bool
}

// bias is the difference between the addresses of mapping m of the file
// and the file's own.
func (f *unwindFile) bias(m *stacks.Mapping) uint64 {
	for _, prog := range f.loads {
		if m.Offset >= prog.Off && m.Offset < prog.Off+prog.Filesz {
			return m.Start - (prog.Vaddr + (m.Offset - prog.Off))
		}
	}
	return 0
}

// unwindPath is a file's path and its identity, stat'ed once: ok is false
// when it cannot be.
type unwindPath struct {
	path string
	id   fileID
	ok   bool
}

func statPath(path string) unwindPath {
	id, ok := statID(path)
	return unwindPath{path, id, ok}
}

// file returns the table of the file at path, loading it the first time.
func (t *unwindTables) file(path string) *unwindFile {
	return t.fileAt(statPath(path))
}

// fileAt is file for a path stat'ed already.
func (t *unwindTables) fileAt(u unwindPath) *unwindFile {
	if u.ok {
		if f, seen := t.files[u.id]; seen {
			return f
		}
	}
	f := t.open(u.path, u.id, u.ok)
	if u.ok && !f.unread {
		t.files[u.id] = f
	}
	return f
}

// prefetch makes the tables of the files of paths that have none yet, all
// at once. Placing a table in unwind_tables, a map of maps, waits for an
// RCU grace period, 10 to 20 ms here: one after the other, the tables of a
// launched command's program, loader, shim and libc had been most of the
// time before its first instruction. Called with t.mu held.
func (t *unwindTables) prefetch(paths []unwindPath) {
	type job struct {
		id   fileID
		path string
		f    *unwindFile
	}
	var jobs []job
	seen := map[fileID]bool{}
	for _, u := range paths {
		if !u.ok || seen[u.id] {
			continue
		}
		if _, done := t.files[u.id]; done {
			continue
		}
		seen[u.id] = true
		jobs = append(jobs, job{id: u.id, path: u.path})
	}
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() { jobs[i].f = t.open(jobs[i].path, jobs[i].id, true) })
	}
	wg.Wait()
	for _, j := range jobs {
		if !j.f.unread {
			t.files[j.id] = j.f
		}
	}
}

// open reads the file at path, whose id is id if known, and makes its
// table (the one parsed ahead, if any). Safe for concurrent use.
func (t *unwindTables) open(path string, id fileID, known bool) *unwindFile {
	f := &unwindFile{}
	ef, err := elf.Open(path)
	if err != nil {
		f.unread = true
		return f
	}
	defer ef.Close()
	for _, prog := range ef.Progs {
		if prog.Type != elf.PT_LOAD {
			continue
		}
		f.loads = append(f.loads, prog.ProgHeader)
		if prog.Flags&elf.PF_X != 0 {
			if f.textEnd == 0 || prog.Vaddr < f.textStart {
				f.textStart = prog.Vaddr
			}
			f.textEnd = max(f.textEnd, prog.Vaddr+prog.Memsz)
		}
	}
	if tab, err := tableOf(id, known, ef); err == nil {
		f.table, f.count = t.load(tab)
	}
	return f
}

// register lets the loader's notice (bpf/libs.h) place the table of file
// f, named by the loader as name ("" for the executable of process pid).
func (t *unwindTables) register(pid int, name string, f *unwindFile) {
	if f.count == 0 {
		return
	}
	v := bpf.MdtraceUnwindFile{TextStart: f.textStart, TextEnd: f.textEnd, Table: f.table, Count: f.count}
	if isLoader(name) {
		v.Loader = 1
	}
	if name == "" {
		t.exes.Put(uint32(pid), &v)
		return
	}
	// A name is given its file once, for every process (a build's
	// thousands of children name the same few).
	if t.placed[name] == v {
		return
	}
	if t.named.Put(pathHash(name), &v) == nil {
		t.placed[name] = v
	}
}

// pathHash is path_hash in bpf/unwind.h: FNV-1a of the first 255 bytes.
func pathHash(path string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(path) && i < 255; i++ {
		h ^= uint64(path[i])
		h *= 0x100000001b3
	}
	return h
}

// load places a file's table, tab, in an array of exactly its entries,
// and returns its number; count 0 when the file has none, or there is no room
// left (counted).
func (t *unwindTables) load(tab *unwind.Table) (table, count uint32) {
	n := uint32(len(tab.Entries))
	// The walk's binary search takes 21 steps: 2M entries.
	if n == 0 || n > 1<<21 {
		return 0, 0
	}
	keys := make([]uint32, n)
	vals := make([]bpf.MdtraceUnwindEntry, n)
	for i, e := range tab.Entries {
		if e.PC > 0xffffffff {
			// Code beyond 4 GiB: an entry's pc does not hold it.
			return 0, 0
		}
		keys[i] = uint32(i)
		vals[i] = bpf.MdtraceUnwindEntry{Pc: uint32(e.PC), Rule: packRule(e.Rule)}
	}
	failed := func() (uint32, uint32) {
		t.acct.Lock()
		t.lost++
		t.acct.Unlock()
		return 0, 0
	}
	fill := func(m *ebpf.Map) bool {
		if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
			// Kernels without batch operations on arrays: one at a time.
			for i := range keys {
				if err := m.Put(keys[i], vals[i]); err != nil {
					return false
				}
			}
		}
		return true
	}
	held := func() (uint32, uint32) {
		t.acct.Lock()
		t.held++
		t.acct.Unlock()
		return table, n
	}
	if pt, ok := t.takePooled(n); ok {
		// Placed already: no walk reads it before a list names it.
		defer pt.m.Close()
		if !fill(pt.m) {
			return failed()
		}
		table = pt.table
		return held()
	}
	table, ok := t.reserve(n)
	if !ok {
		return failed()
	}
	m, err := t.newArray(n)
	if err != nil {
		return failed()
	}
	// The outer map holds the table from here; this descriptor goes.
	defer m.Close()
	if !fill(m) {
		return failed()
	}
	if err := t.tables.Put(table, m); err != nil {
		return failed()
	}
	return held()
}

// newArray makes an array of n entries for a table, not placed yet.
func (t *unwindTables) newArray(n uint32) (*ebpf.Map, error) {
	spec := t.inner.Copy()
	spec.MaxEntries = n
	return ebpf.NewMap(spec)
}

// reserve takes the room of a table of n entries and its number, first, so
// that tables made at once do not take the same. A table that cannot be
// made after all leaves its room and number unused. False when there is
// no room left.
func (t *unwindTables) reserve(n uint32) (table uint32, ok bool) {
	t.acct.Lock()
	defer t.acct.Unlock()
	if t.used+n > t.room || t.used+n < t.used || t.made+1 >= maxUnwindTables {
		return 0, false
	}
	t.made++
	t.used += n
	return t.made, true
}

// forgetUnwind drops process pid's list of mappings.
func (p *Probes) forgetUnwind(pid int) {
	if p.unwind == nil {
		return
	}
	p.unwind.mu.Lock()
	defer p.unwind.mu.Unlock()
	p.unwind.procs.Delete(uint32(pid))
	p.unwind.exes.Delete(uint32(pid))
	if p.unwind.notices != nil {
		p.unwind.notices.Delete(uint32(pid))
	}
	p.deferMu.Lock()
	delete(p.deferExecs, pid)
	p.deferMu.Unlock()
}

// UnwindTablesLost is the number of files whose unwind tables did not fit
// in the room the probes have (ProbeConfig.UnwindEntries, or the number of
// tables): their frames are walked by frame pointers.
func (p *Probes) UnwindTablesLost() int {
	if p.unwind == nil {
		return 0
	}
	p.unwind.acct.Lock()
	defer p.unwind.acct.Unlock()
	return p.unwind.lost
}
