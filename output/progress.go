package output

import (
	"fmt"
	"io"
)

// Progress is a line on a terminal that tells a person how far a long job
// is, redrawn in place: "mdtrace: PREFIX: TEXT". A nil *Progress, for
// output that is not a terminal or a job too short to need one, draws
// nothing.
type Progress struct {
	w      io.Writer
	prefix string
}

// NewProgress returns the progress line of a job of n items on w, or nil
// when w is not a terminal or n is under two ProgressSteps: a job that
// short ends before a line would say anything.
func NewProgress(w io.Writer, n int, prefix string) *Progress {
	if n < 2*ProgressStep || !IsTerminal(w) {
		return nil
	}
	return &Progress{w: w, prefix: prefix}
}

// Update redraws the line with the text of format.
func (p *Progress) Update(format string, args ...any) {
	if p == nil {
		return
	}
	fmt.Fprintf(p.w, "\r\x1b[Kmdtrace: %s: %s", p.prefix, fmt.Sprintf(format, args...))
}

// Done redraws the line a last time and ends it, so that what follows is
// written below it.
func (p *Progress) Done(format string, args ...any) {
	if p == nil {
		return
	}
	p.Update(format, args...)
	fmt.Fprint(p.w, "\n")
}
