//go:build linux

package session

import (
	"fmt"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/options"
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
func (s *session) suppressed(p *proc, maps *stacks.Maps) func(*leak.Alloc, []stacks.Frame) bool {
	if len(s.rules) == 0 {
		return nil
	}
	sources := len(s.flags.Suppressions) > 0
	return func(_ *leak.Alloc, frames []stacks.Frame) bool {
		fs := make([]suppress.Frame, len(frames))
		for i, f := range frames {
			fs[i] = suppress.Frame{Func: stacks.Demangle(f.Func), RawFunc: f.Func, File: f.MapName}
			if sources {
				if file, _, ok := s.sym.Line(p.pid, maps, f.PC); ok {
					fs[i].Source = file
				}
			}
		}
		return suppress.Match(s.rules, fs) >= 0
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
