//go:build linux

package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// auditShell is the program whose allocator --all probes: the system's
// libc, as the loader resolves it for the shell.
const auditShell = "/bin/sh"

// auditTop is the number of processes a summary lists.
const auditTop = 25

// RunAll audits every process on the host that uses the system's libc, or
// another copy of glibc's libc (a container's): uprobes without a PID
// filter feed one live table, summed per process on an interrupt and every
// --interval. Only blocks allocated since mdtrace started are known, and
// only those of each process's current program: a process that executes
// another program leaves its blocks behind.
func RunAll(flags *options.Flags, stdout, stderr io.Writer) (int, error) {
	if err := CheckPrivileges(); err != nil {
		return 1, err
	}
	lib, err := tracer.AllocatorOfFile(auditShell, os.Environ())
	if err != nil {
		return 1, fmt.Errorf("finding the system's libc: %w", err)
	}
	probes, err := tracer.LoadProbes(tracer.ProbeConfig{MaxAllocs: flags.MaxAllocs, All: true})
	if err != nil {
		return 1, err
	}
	defer probes.Close()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer signal.Stop(sigs)
	say := func(msg string) { fmt.Fprintf(stderr, "mdtrace: %s\n", msg) }
	if err := partialAttach(probes.Attach(0, lib), say); err != nil {
		return 1, err
	}
	if err := probes.WatchAllExecs(); err != nil {
		return 1, err
	}
	libcs := newLibcFinder(lib)
	if flags.ReadyFile != "" {
		if err := writeReadyFile(flags.ReadyFile, os.Getpid()); err != nil {
			return 1, err
		}
	}
	fmt.Fprintf(stderr, "mdtrace: auditing every process that uses %s; interrupt for the summary\n", lib)
	libcs.scan(probes, say)
	start := time.Now()
	// New processes are looked at for other copies of libc, and the gens
	// of processes gone are dropped, this often.
	scan := time.NewTicker(libcScanInterval)
	defer scan.Stop()
	var tick <-chan time.Time
	if flags.Interval > 0 {
		t := time.NewTicker(flags.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			auditSummary(stdout, probes, start)
		case <-scan.C:
			libcs.scan(probes, say)
			probes.ForgetExited(processAlive)
		case <-sigs:
			probes.Detach()
			auditSummary(stdout, probes, start)
			if c, err := probes.Counters(); err == nil {
				for _, l := range lossLines(c, flags.MaxAllocs, 0) {
					fmt.Fprintf(stderr, "mdtrace: %s\n", l)
				}
			}
			return 0, nil
		}
	}
}

// auditSummary prints the live blocks and bytes of the processes with the
// most live bytes, and drops the tables of processes that have exited.
func auditSummary(w io.Writer, probes *tracer.Probes, start time.Time) {
	totals, err := probes.Totals()
	if err != nil {
		fmt.Fprintf(w, "mdtrace: %v\n", err)
		return
	}
	type row struct {
		pid int
		tracer.Totals
	}
	var (
		rows          []row
		blocks, bytes uint64
	)
	for pid, t := range totals {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			probes.Forget(pid)
			continue
		}
		rows = append(rows, row{pid, t})
		blocks += t.Blocks
		bytes += t.Bytes
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.Bytes != b.Bytes {
			if a.Bytes > b.Bytes {
				return -1
			}
			return 1
		}
		return a.pid - b.pid
	})
	fmt.Fprintf(w, "mdtrace: live heap allocated in the last %s, by process: %d processes, %d blocks, %d bytes\n",
		time.Since(start).Round(time.Second), len(rows), blocks, bytes)
	fmt.Fprintf(w, "%8s %10s %14s  %s\n", "PID", "BLOCKS", "BYTES", "PROGRAM")
	for i, r := range rows {
		if i == auditTop {
			fmt.Fprintf(w, "%8s (%d more)\n", "...", len(rows)-auditTop)
			break
		}
		fmt.Fprintf(w, "%8d %10d %14d  %s\n", r.pid, r.Blocks, r.Bytes, strings.TrimSpace(tracer.ProgName(r.pid)))
	}
}

// libcScanInterval is how often --all looks for processes on another copy
// of libc, a container's: their allocations before are not counted.
const libcScanInterval = time.Second

// libcFinder finds the copies of glibc's libc that processes map, each
// file once, and the processes it has looked at.
type libcFinder struct {
	probed []os.FileInfo
	// seen is each process looked at, with its program's file and start
	// time: an exec changes the file, a new process the start time.
	seen map[int]procStamp
}

type procStamp struct {
	exe   os.FileInfo
	start string
}

func newLibcFinder(lib stacks.File) *libcFinder {
	f := &libcFinder{seen: map[int]procStamp{}}
	if fi, err := os.Stat(lib.Path); err == nil {
		f.probed = append(f.probed, fi)
	}
	return f
}

// scan probes, for every process, the libc of the processes started or
// executed since the last scan, if it is another file than those probed.
func (f *libcFinder) scan(probes *tracer.Probes, say func(string)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	alive := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		alive[pid] = true
		exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			// A kernel thread, or gone.
			continue
		}
		st, err := tracer.StatFields(pid)
		if err != nil || len(st) < 20 {
			continue
		}
		// Field 22 of /proc/PID/stat, the start time, is the 20th after
		// the command's name.
		stamp := procStamp{exe, st[19]}
		if old, ok := f.seen[pid]; ok && os.SameFile(old.exe, exe) && old.start == stamp.start {
			continue
		}
		f.seen[pid] = stamp
		f.probeLibc(pid, probes, say)
	}
	for pid := range f.seen {
		if !alive[pid] {
			delete(f.seen, pid)
		}
	}
}

// probeLibc probes the libc that process pid maps, when it is a file not
// probed yet.
func (f *libcFinder) probeLibc(pid int, probes *tracer.Probes, say func(string)) {
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return
	}
	for i := range maps.Mappings {
		m := &maps.Mappings[i]
		if m.Inode == 0 || !strings.HasPrefix(filepath.Base(m.Name()), "libc.so.") {
			continue
		}
		file := stacks.MappedFile(pid, m)
		fi, err := os.Stat(file.Path)
		if err != nil || slices.ContainsFunc(f.probed, func(p os.FileInfo) bool { return os.SameFile(p, fi) }) {
			return
		}
		if err := partialAttach(probes.Attach(0, file), say); err != nil {
			if errors.Is(err, tracer.ErrProcessGone) || !processAlive(pid) {
				// Another process that maps it will say.
				return
			}
			say(fmt.Sprintf("the copy of libc of process %d (%s), %s, cannot be probed: %v; its processes are not counted", pid, strings.TrimSpace(tracer.ProgName(pid)), file.Name, err))
			f.probed = append(f.probed, fi)
			return
		}
		f.probed = append(f.probed, fi)
		say(fmt.Sprintf("also auditing every process that uses the libc of process %d (%s), %s, another file than the system's: allocations made with it before now are not counted", pid, strings.TrimSpace(tracer.ProgName(pid)), file.Name))
		return
	}
}
