//go:build linux

package session

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/output"
	"github.com/mdtrace/mdtrace/stacks"
)

// periodic is what each --interval does: the top view with --top, else a
// heap dump of every process, as signal 47 writes.
func (s *session) periodic() {
	if s.flags.Top > 0 {
		s.showTop(os.Stdout)
		return
	}
	// Each period's dump has a name of its own, its time, so that the
	// dumps of a run can be compared (mdtrace diff); signal 47's keeps
	// Android's name.
	now := time.Now().Format("20060102T150405.000")
	for _, p := range s.live() {
		s.dump(p, fmt.Sprintf("%s.%d.%s.txt", s.cfg.BacktraceDumpPrefix, p.pid, now))
	}
}

// showTop writes the top view of every traced process to f, replacing the
// last one when f is a terminal.
func (s *session) showTop(f *os.File) {
	var b bytes.Buffer
	if output.IsTerminal(f) {
		b.WriteString(output.ClearScreen)
	}
	now := time.Now()
	for _, p := range s.live() {
		s.withSnapshot(p, func(snap *leak.Snapshot, maps *stacks.Maps) {
			sites, total := snap.Sites()
			output.WriteTopSites(&b, p.pid, p.prog, now, sites, total, s.flags.Top, s.frames(p, maps))
		})
	}
	f.Write(b.Bytes())
}
