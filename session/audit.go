//go:build linux

package session

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

const (
	// auditTop is the number of processes a text summary lists.
	auditTop = 25
	// auditSites is the number of allocation sites given for each
	// process a summary lists, with the backtrace option.
	auditSites = 5
	// auditKeptExits bounds the processes that ended during the audit
	// whose figures are kept: the largest; the others are counted.
	auditKeptExits = 1000
	// auditUnseenScans is how many scans apart the table is read for
	// processes that ended before a scan saw them (their gens are dropped
	// then too, after their figures are kept).
	auditUnseenScans = 10
)

// auditor keeps what --all knows of each process: its names and cgroup,
// read when it is first seen (or executes a program), its maps (with the
// backtrace option, to name its frames after it ends), and the final
// figures of the processes that ended.
type auditor struct {
	probes *tracer.Probes
	flags  *options.Flags
	depth  int
	// cgroups names the cgroups of processes that ended unseen.
	cgroups cgroupPaths
	// dumpPrefix, when set, is the prefix of the heap dumps: every process
	// that added blocks on signal 47 (dumpAll), and, with dumpOnExit, each
	// process as it is found ended.
	dumpPrefix string
	dumpOnExit bool
	stderr     io.Writer
	sym        *stacks.Symbolizer
	start      time.Time
	procs      map[int]*auditProc
	// begun is set once the processes running when the audit began are
	// seen: those seen after are new.
	begun bool
	// exited are the figures of the processes that ended, the largest
	// auditKeptExits; dropped counts the others.
	exited  []output.AuditProcess
	dropped int
}

type auditProc struct {
	pid               int
	comm, exe, cgroup string
	// fresh: started, or executing its program, after the audit began,
	// with its allocator probed from its start: all its blocks are known.
	fresh bool
	maps  *stacks.Maps
	hist  stacks.MapsHistory
}

func newAuditor(probes *tracer.Probes, flags *options.Flags, depth int) *auditor {
	a := &auditor{probes: probes, flags: flags, depth: depth, start: time.Now(), procs: map[int]*auditProc{}}
	if depth > 0 {
		a.sym = stacks.NewSymbolizer()
		a.sym.DebugDirs = flags.DebugDirs
	}
	return a
}

// seen notes process pid, new or executing another program: its names,
// cgroup and, with backtraces, its maps and unwind tables.
func (a *auditor) seen(pid int) { a.seenWith(pid, nil) }

// seenWith is seen with the process's maps read already (maps, if not
// nil), and its unwind list placed from them: those of a process heard of
// by its first walk, which may have ended since. It keeps its maps to name
// its frames.
func (a *auditor) seenWith(pid int, maps *stacks.Maps) {
	if maps == nil && !processAlive(pid) {
		// Nothing left to know of it.
		return
	}
	p := &auditProc{pid: pid, comm: readComm(pid), cgroup: readCgroup(pid), fresh: a.begun}
	p.exe, _ = os.Readlink(exeLink(pid))
	if p.exe == "" && maps != nil && len(maps.Mappings) > 0 && maps.Mappings[0].Inode != 0 {
		// Ended: its program is its first mapping.
		p.exe = maps.Mappings[0].Name()
	}
	if a.depth > 0 {
		if maps == nil {
			// Its stacks go through code without frame pointers; a
			// process gone meanwhile has nothing to walk.
			maps, _ = a.probes.LoadUnwindMaps(pid)
		}
		if maps != nil {
			p.maps = maps
			p.hist.Add(maps)
		}
	}
	a.procs[pid] = p
}

// late notes that process pid's allocator was probed only when it was
// seen: its allocations before are not known.
func (a *auditor) late(pid int) {
	if p := a.procs[pid]; p != nil {
		p.fresh = false
	}
}

// current returns live process pid as it is now: seen now if no scan has
// seen it yet, its maps read again otherwise.
func (a *auditor) current(pid int) *auditProc {
	p := a.procs[pid]
	if p == nil {
		a.seen(pid)
		return a.procs[pid]
	}
	a.refresh(p)
	return p
}

// refresh rereads the maps of a live process before its frames are named:
// it may have loaded libraries since it was first seen.
func (a *auditor) refresh(p *auditProc) {
	if a.depth == 0 {
		return
	}
	if maps, err := stacks.ReadMaps(p.pid); err == nil {
		p.maps = maps
		p.hist.Add(maps)
	}
}

// figures are process pid's added blocks and bytes and, with backtraces,
// its sites.
func (a *auditor) figures(pid int, t tracer.Totals, p *auditProc) output.AuditProcess {
	ap := output.AuditProcess{PID: pid, Added: leak.Site{Blocks: t.Blocks, Bytes: t.Bytes}, Sampled: t.Sampled, AnonRSS: readAnonRSS(pid)}
	if p != nil {
		ap.Comm, ap.Exe, ap.Cgroup, ap.New = p.comm, p.exe, p.cgroup, p.fresh
	}
	if a.depth == 0 || t.Blocks == 0 {
		return ap
	}
	snap, err := a.probes.Snapshot(pid)
	if err != nil {
		return ap
	}
	sites, _ := snap.Sites()
	ap.Sites, ap.NSites = sites[:min(auditSites, len(sites))], len(sites)
	if p != nil && p.maps != nil {
		maps, hist := p.maps, &p.hist
		ap.Frames = func(pcs []uint64) []stacks.Frame { return a.sym.SymbolizeWithHistory(pid, maps, hist, pcs) }
	}
	return ap
}

// reap keeps the final figures of the processes that ended (not in alive,
// nor running now), their frames named now, while their maps are known,
// and drops their blocks from the table. With all, the table is read even
// when no process it knew of ended, for those that ended before a scan
// saw them.
func (a *auditor) reap(alive map[int]bool, all bool) {
	gone := a.ended(alive)
	// Reading the whole table costs: it is read when a known process
	// ended, and with all for processes that ended before a scan saw
	// them (their blocks are in the table, their names unknown).
	if len(gone) == 0 && !all {
		return
	}
	totals, err := a.probes.Totals()
	if err != nil {
		return
	}
	a.reapTotals(totals, alive, gone)
}

// ended lists the processes the auditor knows of that ended: not in alive
// (the last scan's), nor running now.
func (a *auditor) ended(alive map[int]bool) []int {
	var gone []int
	for pid := range a.procs {
		if !alive[pid] && !processAlive(pid) {
			gone = append(gone, pid)
		}
	}
	return gone
}

// reapTotals is reap with the table's totals read, gone the processes it
// knew of that ended: those that ended unseen are found in totals. Their
// entries stay in totals, their blocks no longer in the table.
func (a *auditor) reapTotals(totals map[int]tracer.Totals, alive map[int]bool, gone []int) {
	for pid := range totals {
		if _, ok := a.procs[pid]; !ok && !alive[pid] && !processAlive(pid) {
			gone = append(gone, pid)
		}
	}
	for _, pid := range gone {
		p := a.procs[pid]
		delete(a.procs, pid)
		t := totals[pid]
		if t.Blocks > 0 && a.dumpOnExit {
			a.dump(pid, p, fmt.Sprintf("%s.%d.exit.txt", a.dumpPrefix, pid))
		}
		if t.Blocks > 0 {
			ap := a.figures(pid, t, p)
			ap.Exited = true
			if p == nil {
				// Named by its exec, as the probes noted it.
				if n, ok := a.probes.ExecName(pid); ok && n.Path+n.Comm != "" {
					ap.Exe, ap.Comm, ap.Cgroup = execPath(n.Path), n.Comm, a.cgroups.path(n.Cgroup)
				} else {
					ap.Comm = "ended before it was looked at"
				}
			}
			ap.Resolved = make([][]stacks.Frame, len(ap.Sites))
			for i, s := range ap.Sites {
				if len(s.Frames) > 0 {
					ap.Resolved[i] = output.Resolve(s.Frames, ap.Frames)
				}
			}
			ap.Frames = nil
			a.keepExited(ap)
		}
		a.probes.Forget(pid)
	}
}

// keepExited keeps ap among the largest auditKeptExits ended processes.
func (a *auditor) keepExited(ap output.AuditProcess) {
	a.exited = append(a.exited, ap)
	if len(a.exited) <= auditKeptExits {
		return
	}
	slices.SortStableFunc(a.exited, byAdded)
	a.exited = a.exited[:auditKeptExits]
	a.dropped++
}

// byAdded ranks processes by the bytes, then the blocks, they added, then
// by PID.
func byAdded(x, y output.AuditProcess) int {
	switch {
	case x.Added.Bytes != y.Added.Bytes:
		if x.Added.Bytes > y.Added.Bytes {
			return -1
		}
		return 1
	case x.Added.Blocks != y.Added.Blocks:
		if x.Added.Blocks > y.Added.Blocks {
			return -1
		}
		return 1
	}
	return x.PID - y.PID
}

// summary writes the ranking of the live processes and the ended ones.
func (a *auditor) summary(w io.Writer) {
	totals, err := a.probes.Totals()
	if err != nil {
		fmt.Fprintf(w, "mdtrace: %v\n", err)
		return
	}
	// The processes that ended first, from the same read of the table.
	a.reapTotals(totals, nil, a.ended(nil))
	aud := &output.Audit{Elapsed: time.Since(a.start), Shown: auditTop, Dropped: a.dropped, KeptExits: auditKeptExits, SampleBytes: a.flags.SampleBytes}
	if a.depth > 0 {
		aud.Sites = auditSites
	}
	// What was not counted goes with every ranking, and into its JSON.
	if c, err := a.probes.Counters(); err != nil {
		aud.Losses = []string{fmt.Sprintf("the probes' counts of what they lost could not be read: %v", err)}
	} else {
		aud.Losses = append(lossLines(c, a.flags.MaxAllocs, a.depth), auditDeferLines(c, a.probes.DeferredCounts())...)
	}
	for pid, t := range totals {
		p := a.procs[pid]
		if p == nil && !processAlive(pid) {
			// Gone since the last scan: reap keeps its figures.
			continue
		}
		aud.Processes = append(aud.Processes, output.AuditProcess{PID: pid, Added: leak.Site{Blocks: t.Blocks, Bytes: t.Bytes}, Sampled: t.Sampled})
	}
	aud.Processes = append(aud.Processes, a.exited...)
	slices.SortStableFunc(aud.Processes, byAdded)
	// Names, sites and frames for the processes listed: all of them in
	// JSON, the first auditTop still running in text (the text folds the
	// ended ones, named as they ended, into rows by program).
	running := 0
	for i := range aud.Processes {
		ap := &aud.Processes[i]
		aud.Total.Blocks += ap.Added.Blocks
		aud.Total.Bytes += ap.Added.Bytes
		if ap.Exited {
			continue
		}
		if running < auditTop || a.flags.Format == "json" {
			*ap = a.figures(ap.PID, tracer.Totals{Blocks: ap.Added.Blocks, Bytes: ap.Added.Bytes, Sampled: ap.Sampled}, a.current(ap.PID))
		}
		running++
	}
	var err2 error
	if a.flags.Format == "json" {
		err2 = output.WriteAuditJSON(w, aud, time.Now())
	} else {
		err2 = output.WriteAuditText(w, aud)
	}
	if err2 != nil {
		fmt.Fprintf(os.Stderr, "mdtrace: writing the summary: %v\n", err2)
	}
}

// dumpAll writes the heap dump of every live process that added blocks
// during the audit, as Android's malloc debug does on signal 47: the
// blocks it allocated since the audit began that are still live.
func (a *auditor) dumpAll() {
	totals, err := a.probes.Totals()
	if err != nil {
		fmt.Fprintf(a.stderr, "mdtrace: %v\n", err)
		return
	}
	pids := slices.Sorted(maps.Keys(totals))
	n := 0
	for _, pid := range pids {
		if totals[pid].Blocks == 0 || !processAlive(pid) {
			continue
		}
		if a.dump(pid, a.current(pid), fmt.Sprintf("%s.%d.txt", a.dumpPrefix, pid)) {
			n++
		}
	}
	fmt.Fprintf(a.stderr, "mdtrace: heap dumps of %d processes written (%s.PID.txt)\n", n, a.dumpPrefix)
}

// dump writes the heap dump of process pid (p, if known) to path: its
// blocks allocated during the audit, with its maps as last read. It
// reports whether it wrote it.
func (a *auditor) dump(pid int, p *auditProc, path string) bool {
	snap, err := a.probes.Snapshot(pid)
	if err != nil {
		fmt.Fprintf(a.stderr, "mdtrace: the heap dump of process %d: %v\n", pid, err)
		return false
	}
	d := &output.HeapDump{Fingerprint: output.BuildFingerprint(), BacktraceSize: a.depth, Snapshot: snap}
	if p != nil && p.maps != nil {
		d.Maps = p.maps.Raw
	}
	if err := output.WriteFileAtomic(path, a.flags.FileMode, func(w io.Writer) error { return output.WriteHeapDump(w, d) }); err != nil {
		fmt.Fprintf(a.stderr, "mdtrace: %v\n", err)
		return false
	}
	return true
}

// readAnonRSS is process pid's resident anonymous memory in bytes (its
// heap's pages among them), 0 if it is gone.
func readAnonRSS(pid int) uint64 {
	v, _ := statusField(pid, "RssAnon")
	kb, _ := strconv.ParseUint(strings.TrimSuffix(v, " kB"), 10, 64)
	return kb << 10
}

// statusField is the value of field name of /proc/PID/status, trimmed;
// false if the process is gone or has no such field.
func statusField(pid int, name string) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// readComm is process pid's command name, "" if it is gone.
func readComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readCgroup is process pid's cgroup in the unified hierarchy (the "0::"
// line), or else its first hierarchy's; "" if unknown.
// execPath is the program's file a path given to execve names: its
// symbolic links resolved, as /proc/PID/exe has them, where it still
// exists.
func execPath(path string) string {
	if !filepath.IsAbs(path) {
		return path
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// cgroupPaths names cgroups by their ids (cgroup v2: a cgroup's id is its
// directory's inode), as readCgroup names a process's.
type cgroupPaths struct {
	byID map[uint64]string
	// walked is when the hierarchy was last read: an unknown id reads it
	// again at most once a second.
	walked time.Time
}

func (c *cgroupPaths) path(id uint64) string {
	if id == 0 {
		return ""
	}
	if p, ok := c.byID[id]; ok {
		return p
	}
	if time.Since(c.walked) < time.Second {
		return ""
	}
	c.walked = time.Now()
	c.byID = map[uint64]string{}
	root := cgroup2Mount()
	if root == "" {
		return ""
	}
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			rel := strings.TrimPrefix(path, root)
			if rel == "" {
				rel = "/"
			}
			c.byID[st.Ino] = rel
		}
		return nil
	})
	return c.byID[id]
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside version 1's), "" if
// nowhere.
func cgroup2Mount() string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

func readCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	first := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			return f[2]
		}
		if first == "" {
			first = f[2]
		}
	}
	return first
}
