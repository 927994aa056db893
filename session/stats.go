//go:build linux

package session

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/stats"
	"github.com/mdtrace/mdtrace/tracer"
)

// logVerbose logs Android's verbose lines at the start of tracing: which
// signal does what, sent to mdtrace (whose PID they name), and that malloc
// debug is on. A preloaded shim given the options logs its own, naming the
// traced process, to which the same signals may be sent.
func (s *session) logVerbose(p *proc) {
	if !s.cfg.Has(options.Verbose) || s.shim != "" {
		return
	}
	me := os.Getpid()
	run := func(sig int, what string) {
		s.log.Infof(p.pid, p.pid, "%s: Run: 'kill -%d %d' to %s.", p.prog, sig, me, what)
	}
	if s.cfg.BacktraceEnableOnSignal {
		run(options.BacktraceEnableSignal, "enable backtracing")
	}
	if s.cfg.Has(options.Backtrace) {
		run(options.BacktraceDumpSignal, "dump the backtrace")
	}
	if s.cfg.Has(options.RecordAllocs) {
		run(options.RecordAllocsSignal, "dump the allocation records")
	}
	if s.cfg.Has(options.LogAllocatorStatsOnSignal) {
		run(options.LogAllocatorStatsSignal, "log allocator stats")
	}
	if s.cfg.Has(options.CheckUnreachableOnSignal) {
		run(options.CheckUnreachableSignal, "check for unreachable memory")
	}
	s.log.Infof(p.pid, p.pid, "%s: malloc debug enabled", p.prog)
}

// sizeBuckets are the upper bounds of the size histogram of the statistics.
var sizeBuckets = []uint64{16, 64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}

// logStats logs mdtrace's own statistics of process p, where Android logs
// the allocator's (log_allocator_stats_on_signal, _on_exit): the live
// blocks and bytes, the calls per second since tracing began, and the
// live blocks by size. Call it with s.mu held.
func (s *session) logStats(p *proc) {
	snap, err := s.probes.Snapshot(p.pid)
	if err != nil {
		s.notice("%v", err)
		return
	}
	for _, line := range statsLines(p.prog, snap, s.counters(), time.Since(s.start)) {
		s.log.Infof(p.pid, p.pid, "%s", line)
	}
}

// counters reads the probes' counters, zero when they cannot be read.
func (s *session) counters() tracer.Counters {
	c, _ := s.probes.Counters()
	return c
}

// statsLines are the lines logStats logs.
func statsLines(prog string, snap *leak.Snapshot, c tracer.Counters, elapsed time.Duration) []string {
	var bytes uint64
	hist := make([]int, len(sizeBuckets)+1)
	for _, a := range snap.Allocs {
		bytes += a.Size
		i := 0
		for i < len(sizeBuckets) && a.Size > sizeBuckets[i] {
			i++
		}
		hist[i]++
	}
	secs := elapsed.Seconds()
	if secs <= 0 {
		secs = 1e-9
	}
	var b strings.Builder
	for i, n := range hist {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == len(sizeBuckets) {
			fmt.Fprintf(&b, ">%s: %d", sizeName(sizeBuckets[i-1]), n)
		} else {
			fmt.Fprintf(&b, "<=%s: %d", sizeName(sizeBuckets[i]), n)
		}
	}
	return []string{
		"Logging allocator stats...",
		fmt.Sprintf("%s: %d live blocks, %d bytes", prog, len(snap.Allocs), bytes),
		fmt.Sprintf("%s: %d allocations and %d frees in %.1f s, %.0f/s and %.0f/s (every process traced)",
			prog, c.Allocs, c.Frees, elapsed.Seconds(), float64(c.Allocs)/secs, float64(c.Frees)/secs),
		fmt.Sprintf("%s: live blocks by size: %s", prog, b.String()),
	}
}

// sizeName writes a power-of-two byte count short: 64, 4K, 1M.
func sizeName(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// writeStats writes the statistics of process p's calls (--stats) on
// standard error, with what they miss.
func (s *session) writeStats(p *proc) {
	st, late, notes := s.rec.takeStats(p.pid)
	if st == nil {
		fmt.Fprintf(s.stderr, "mdtrace: statistics of process %d (%s): no allocator call was seen\n", p.pid, p.prog)
		return
	}
	opts := stats.Options{Top: 10, Notes: notes}
	if s.flags.PID != 0 {
		opts.Notes = append(opts.Notes, "mdtrace attached to a running process: only its calls since then count, and frees of its older blocks are not counted")
	}
	if lost := s.counters().RecordsLost; lost > 0 {
		opts.Notes = append(opts.Notes, fmt.Sprintf("%d calls of the traced processes were lost (the record ring buffer was full): the figures miss them", lost))
	}
	if late > 0 {
		opts.Notes = append(opts.Notes, fmt.Sprintf("%d calls came more than %v late and were taken out of order: the peak may be off by their blocks", late, time.Duration(statsWindow)))
	}
	if s.sampleBytes > 0 {
		opts.Notes = append(opts.Notes, "--sample-bytes: only the sampled allocations count")
	}
	if !s.cfg.Has(options.Backtrace) {
		opts.NoSites = "no backtraces were taken (the backtrace option gives them)"
	} else {
		frames := s.frames(p, s.mapsOf(p))
		opts.Frames = func(id uint64) []stacks.Frame { return frames(s.probes.Stack(id)) }
	}
	var b strings.Builder
	fmt.Fprintf(&b, "mdtrace: statistics of process %d (%s):\n", p.pid, p.prog)
	st.Write(&b, opts)
	io.WriteString(s.stderr, b.String())
}
