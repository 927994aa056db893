//go:build linux

package session

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/tracer"
)

// auditShell is the program whose allocator --all probes: the system's
// libc, as the loader resolves it for the shell.
const auditShell = "/bin/sh"

// auditTop is the number of processes a summary lists.
const auditTop = 25

// RunAll audits every process on the host that uses the system's libc:
// uprobes without a PID filter feed one live table, summed per process on
// an interrupt and every --interval. Only blocks allocated since mdtrace
// started are known.
func RunAll(flags *options.Flags, stdout, stderr io.Writer) (int, error) {
	if err := CheckPrivileges(); err != nil {
		return 1, err
	}
	lib, err := tracer.AllocatorOfFile(auditShell, os.Environ())
	if err != nil {
		return 1, fmt.Errorf("finding the system's libc: %w", err)
	}
	probes, err := tracer.LoadProbes(tracer.ProbeConfig{MaxAllocs: flags.MaxAllocs})
	if err != nil {
		return 1, err
	}
	defer probes.Close()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	defer signal.Stop(sigs)
	if err := partialAttach(probes.Attach(0, lib), func(msg string) { fmt.Fprintf(stderr, "mdtrace: %s\n", msg) }); err != nil {
		return 1, err
	}
	if flags.ReadyFile != "" {
		if err := writeReadyFile(flags.ReadyFile, os.Getpid()); err != nil {
			return 1, err
		}
	}
	fmt.Fprintf(stderr, "mdtrace: auditing every process that uses %s; interrupt for the summary\n", lib)
	start := time.Now()
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
