//go:build linux

package session

import (
	"fmt"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/options"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/suppress"
)

// Suppressions returns the rules leak reports apply under flags f: the
// built-in ones, unless --no-default-suppressions, then those of each
// --suppressions file.
func Suppressions(f *options.Flags) ([]suppress.Rule, error) {
	var rules []suppress.Rule
	if !f.NoDefaultSuppressions {
		rules = suppress.Default()
	}
	for _, path := range f.Suppressions {
		more, err := suppress.ReadFile(path)
		if err != nil {
			return nil, err
		}
		rules = append(rules, more...)
	}
	return rules, nil
}

// suppressed returns the test of process p's leaked blocks against the
// suppressions, nil when there are none. A rule may name a source file:
// the frames' source files are looked up only where a file of the user's
// has rules, the built-in ones naming functions alone.
func (s *session) suppressed(p *proc, maps *stacks.Maps) func([]stacks.Frame) bool {
	if len(s.rules) == 0 {
		return nil
	}
	sources := len(s.flags.Suppressions) > 0
	// Each distinct frame is demangled and matched once; its source file
	// depends on its pc, which is then part of the key.
	type key struct {
		fn, file string
		pc       uint64
	}
	memo := map[key]suppress.Matches{}
	var ms []suppress.Matches
	return func(frames []stacks.Frame) bool {
		ms = ms[:0]
		for _, f := range frames {
			k := key{fn: f.Func, file: f.MapName}
			if sources {
				k.pc = f.PC
			}
			m, ok := memo[k]
			if !ok {
				sf := suppress.Frame{Func: stacks.Demangle(f.Func), RawFunc: f.Func, File: f.MapName}
				if sources {
					if file, _, ok := s.sym.Line(p.pid, maps, f.PC); ok {
						sf.Source = file
					}
				}
				m = suppress.Of(s.rules, sf)
				memo[k] = m
			}
			ms = append(ms, m)
		}
		return suppress.First(ms) >= 0
	}
}

// bottomLine says on standard error what the leak reports of the run
// listed and left out, all processes together: where the log is standard
// error and one process was reported, its report's last line said it.
func (s *session) bottomLine() {
	switch {
	case s.leakReports == 0:
	case s.leakReports > 1:
		s.notice("%s in %d processes", s.leaks, s.leakReports)
	case !s.logToStderr:
		fmt.Fprintf(s.stderr, "mdtrace: %s\n", s.leaks)
	}
}

// liveSites is how many backtraces the view of live blocks shows.
const liveSites = 20

// liveView reports whether a process's end (or mdtrace's) shows its live
// blocks by backtrace on standard error: with the backtrace option and
// nothing else that reports them (no leak_track, no heap dump at exit, no
// --folded, no --top), the headline "mdtrace -p PID --backtrace" says
// what it saw.
func (s *session) liveView() bool {
	return s.cfg.Has(options.Backtrace) && !s.cfg.Has(options.LeakTrack) && !s.cfg.BacktraceDumpOnExit &&
		s.flags.Folded == "" && s.flags.Top == 0
}

// writeLiveSites writes the view of process p's live blocks, the
// suppressed ones left out and counted.
func (s *session) writeLiveSites(p *proc, snap *leak.Snapshot, maps *stacks.Maps) {
	sites, _ := snap.Sites()
	v := output.LiveSites{PID: p.pid, Prog: p.prog, Since: "at exit", N: liveSites}
	if s.flags.PID != 0 || s.flags.Program != "" {
		v.Since = "since tracing began"
	}
	frames := s.frames(p, maps)
	suppressed := s.suppressed(p, maps)
	for _, site := range sites {
		if suppressed != nil && len(site.Frames) > 0 && suppressed(output.Resolve(site.Frames, frames)) {
			v.Suppressed.Blocks += site.Blocks
			v.Suppressed.Bytes += site.Bytes
			continue
		}
		v.Sites = append(v.Sites, site)
		v.Total.Blocks += site.Blocks
		v.Total.Bytes += site.Bytes
	}
	if err := output.WriteLiveSites(s.stderr, v, frames); err != nil {
		s.notice("%v", err)
	}
}

// reportProgress returns what tells a person at a terminal how far the
// leak report of process p, of blocks blocks, is: a line on standard
// error, redrawn in place, for a report long enough to take a while; nil
// when standard error is not a terminal or the report is short.
func (s *session) reportProgress(p *proc, blocks int) func(phase string, done, total int) {
	where := "the log"
	if s.flags.Log != "" {
		where = s.flags.Log
	}
	return s.progress(p, "leak report", "blocks", where, blocks)
}

// progress returns what tells a person at a terminal how far a report
// (what) of process p, of n items (unit), is: phases "reading" or
// "writing" as it goes, "written" at its end, which says where it went.
// It is nil when standard error is not a terminal or the report is short.
func (s *session) progress(p *proc, what, unit, where string, n int) func(phase string, done, total int) {
	line := output.NewProgress(s.stderr, n, fmt.Sprintf("process %d", p.pid))
	if line == nil {
		return nil
	}
	return func(phase string, done, total int) {
		if phase == "written" {
			// The line goes: the report's bottom line follows.
			line.Done("%s of %d %s written to %s", what, total, unit, where)
			return
		}
		line.Update("%s the %s: %d of %d %s", phase, what, done, total, unit)
	}
}
