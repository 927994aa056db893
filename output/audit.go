package output

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mdtrace/mdtrace/leak"
	"github.com/mdtrace/mdtrace/stacks"
)

// Audit is what `mdtrace --all` says at each summary: the processes ranked
// by the live bytes they added since the audit began (blocks allocated
// during it and still live, or live at the process's exit), and, with the
// backtrace option, each listed process's allocation sites that added the
// most.
type Audit struct {
	// Elapsed is the time since the audit began.
	Elapsed time.Duration
	// Processes are ranked, the most added bytes first; Total adds up
	// all of them, and Shown is how many a text summary lists.
	Processes []AuditProcess
	Total     leak.Site
	Shown     int
	// Sites is how many sites of each listed process a summary gives (0:
	// no backtraces).
	Sites int
	// Dropped counts the processes that ended during the audit whose
	// figures were not kept: only the KeptExits largest are.
	Dropped, KeptExits int
	// Losses are the lines that say what was not counted (a full table,
	// lost backtraces), as the end of a run says them.
	Losses []string
	// SampleBytes, when not 0, says that the probes sampled one
	// allocation every SampleBytes bytes on average: block counts and
	// byte totals, the processes' and their sites', are estimates.
	SampleBytes uint64
}

// AuditProcess is one process of an audit.
type AuditProcess struct {
	PID  int
	Comm string // its command name (/proc/PID/comm)
	Exe  string // its program's file
	// Cgroup is its cgroup (the unified hierarchy's path), "" if unknown.
	Cgroup string
	// Added is the blocks and bytes it allocated during the audit that are
	// still live (at its exit, for one that ended): estimates when the
	// audit samples, from Sampled blocks.
	Added   leak.Site
	Sampled uint64
	// Exited says the process ended during the audit: its figures are
	// those of its end.
	Exited bool
	// New says it started, or executed its program, during the audit,
	// with its allocator probed from its start: Added is all of its live
	// heap. For the others only the blocks of the audit are known.
	New bool
	// AnonRSS is its resident anonymous memory now, in bytes (0 once it
	// ended): where the heap it had before the audit shows.
	AnonRSS uint64
	// Sites are its allocation sites, the most added bytes first (with
	// the backtrace option), NSites how many it had in all.
	Sites  []leak.Site
	NSites int
	// Frames names a site's frames; nil when there are no backtraces.
	// Resolved, when not nil, holds the frames of Sites already named
	// (those of a process that ended, named while its maps were known).
	Frames   func([]uint64) []stacks.Frame
	Resolved [][]stacks.Frame
}

// siteFrames are the named frames of p's site i.
func (p *AuditProcess) siteFrames(i int) []stacks.Frame {
	if i < len(p.Resolved) && p.Resolved[i] != nil {
		return p.Resolved[i]
	}
	return resolve(p.Sites[i].Frames, p.Frames)
}

// WriteAuditText writes a as text: the ranking (the runs of a program that
// ended folded into one row, auditRows), then the top sites of each listed
// row's process, each frame in the leak report's format.
func WriteAuditText(w io.Writer, a *Audit) error {
	var b strings.Builder
	rows := auditRows(a.Processes)
	shown := rows[:min(a.Shown, len(rows))]
	fmt.Fprintf(&b, "mdtrace: live heap allocated in the last %s, by process: %d processes, %d blocks, %d bytes\n",
		a.Elapsed.Round(time.Second), len(a.Processes), a.Total.Blocks, a.Total.Bytes)
	if a.SampleBytes > 0 {
		fmt.Fprintf(&b, "mdtrace: sampled one allocation every %d bytes on average: block counts and byte totals are estimates, sizes are exact\n", a.SampleBytes)
	}
	fmt.Fprintf(&b, "%8s %10s %14s %14s  %s\n", "PID", "BLOCKS", "BYTES", "ANON RSS", "PROGRAM")
	for _, r := range shown {
		p := r.p
		rss := "-"
		if !p.Exited {
			rss = fmt.Sprint(p.AnonRSS)
		}
		name := auditName(p)
		if r.runs > 1 {
			name += fmt.Sprintf(", the largest of %d runs of it that ended: %d blocks, %d bytes in all", r.runs, r.all.Blocks, r.all.Bytes)
		}
		fmt.Fprintf(&b, "%8d %10d %14d %14s  %s\n", p.PID, p.Added.Blocks, p.Added.Bytes, rss, name)
	}
	if len(rows) > len(shown) {
		fmt.Fprintf(&b, "%8s (%d more)\n", "...", len(rows)-len(shown))
	}
	if a.Dropped > 0 {
		fmt.Fprintf(&b, "mdtrace: %d process%s that ended during the audit not listed: only the %d largest are kept\n", a.Dropped, pluralES(a.Dropped), a.KeptExits)
	}
	if a.Sites > 0 {
		for _, r := range shown {
			p := r.p
			if p.Added.Blocks == 0 {
				continue
			}
			top := p.Sites[:min(a.Sites, len(p.Sites))]
			fmt.Fprintf(&b, "mdtrace: process %d (%s): %d bytes in %d allocations added, the %d backtraces with the most bytes of %d:\n",
				p.PID, p.Comm, p.Added.Bytes, p.Added.Blocks, len(top), p.NSites)
			for i, s := range top {
				fmt.Fprintf(&b, "%d bytes in %d allocations:\n", s.Bytes, s.Blocks)
				if len(s.Frames) == 0 {
					b.WriteString("          [no backtrace]\n")
					continue
				}
				b.WriteString(BacktraceString(p.siteFrames(i)))
			}
		}
	}
	for _, l := range a.Losses {
		fmt.Fprintf(&b, "mdtrace: %s\n", l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// auditRow is a row of the text ranking: a process, or the largest of the
// runs of one program that ended during the audit, with their count and
// their figures added up.
type auditRow struct {
	p    *AuditProcess
	runs int
	all  leak.Site
}

// auditRows folds the processes that ended, ranked, into one row for each
// program (its file, in one cgroup; a process of unknown file is a row of
// its own) at the place of its largest run: a build's thousand compiler
// runs, each ending with the heap it never freed, would otherwise fill the
// ranking above the processes still running.
func auditRows(ps []AuditProcess) []auditRow {
	var rows []auditRow
	ended := map[string]int{}
	for i := range ps {
		p := &ps[i]
		// A process of unknown file is not known to be a run of any.
		if p.Exited && p.Exe != "" {
			key := p.Exe + "\x00" + p.Cgroup
			if j, ok := ended[key]; ok {
				rows[j].runs++
				rows[j].all.Blocks += p.Added.Blocks
				rows[j].all.Bytes += p.Added.Bytes
				continue
			}
			ended[key] = len(rows)
		}
		rows = append(rows, auditRow{p: p, runs: 1, all: p.Added})
	}
	return rows
}

// auditName is a process's name in the ranking: its program's file, its
// command name when that differs from the file's, its cgroup outside the
// root, and whether it ended.
func auditName(p *AuditProcess) string {
	name := p.Exe
	if name == "" {
		name = "[" + p.Comm + "]"
	} else if p.Comm != "" && !strings.HasPrefix(lastElem(p.Exe), p.Comm) {
		name += " (" + p.Comm + ")"
	}
	if p.Cgroup != "" && p.Cgroup != "/" {
		name += " cgroup " + p.Cgroup
	}
	if p.New {
		name += " [new]"
	}
	if p.Exited {
		name += " [exited]"
	}
	return name
}

func lastElem(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// The JSON form of an audit: one object a summary, on one line.
type auditJSON struct {
	Time           string             `json:"time"`
	ElapsedSeconds float64            `json:"elapsed_seconds"`
	Processes      int                `json:"processes"`
	AddedBlocks    uint64             `json:"added_blocks"`
	AddedBytes     uint64             `json:"added_bytes"`
	Ranking        []auditProcessJSON `json:"ranking"`
	Dropped        int                `json:"exited_not_kept,omitempty"`
	Losses         []string           `json:"losses,omitempty"`
	// SampleBytes says the figures are estimates from a sample.
	SampleBytes uint64 `json:"sample_bytes,omitempty"`
}

type auditProcessJSON struct {
	PID         int             `json:"pid"`
	Comm        string          `json:"comm"`
	Exe         string          `json:"exe"`
	Cgroup      string          `json:"cgroup,omitempty"`
	AddedBlocks uint64          `json:"added_blocks"`
	AddedBytes  uint64          `json:"added_bytes"`
	Sampled     uint64          `json:"sampled_blocks,omitempty"`
	Exited      bool            `json:"exited"`
	New         bool            `json:"new"`
	AnonRSS     uint64          `json:"anon_rss_bytes,omitempty"`
	Sites       []auditSiteJSON `json:"sites,omitempty"`
	NSites      int             `json:"sites_total,omitempty"`
}

type auditSiteJSON struct {
	Blocks uint64           `json:"blocks"`
	Bytes  uint64           `json:"bytes"`
	Frames []auditFrameJSON `json:"frames"`
}

type auditFrameJSON struct {
	PC       string `json:"pc"`
	RelPC    string `json:"rel_pc"`
	File     string `json:"file,omitempty"`
	Function string `json:"function,omitempty"`
	Offset   uint64 `json:"offset,omitempty"`
}

// WriteAuditJSON writes a as one line of JSON, at time now: every process
// (not only the ones a text summary lists), each with its top sites.
func WriteAuditJSON(w io.Writer, a *Audit, now time.Time) error {
	j := auditJSON{
		Time:           now.UTC().Format(time.RFC3339Nano),
		ElapsedSeconds: a.Elapsed.Seconds(),
		Processes:      len(a.Processes),
		AddedBlocks:    a.Total.Blocks,
		AddedBytes:     a.Total.Bytes,
		Ranking:        make([]auditProcessJSON, 0, len(a.Processes)),
		Dropped:        a.Dropped,
		Losses:         a.Losses,
		SampleBytes:    a.SampleBytes,
	}
	for pi := range a.Processes {
		p := &a.Processes[pi]
		pj := auditProcessJSON{
			PID: p.PID, Comm: p.Comm, Exe: p.Exe, Cgroup: p.Cgroup,
			AddedBlocks: p.Added.Blocks, AddedBytes: p.Added.Bytes, Exited: p.Exited, New: p.New, AnonRSS: p.AnonRSS,
		}
		if a.SampleBytes > 0 {
			pj.Sampled = p.Sampled
		}
		if a.Sites > 0 {
			pj.NSites = p.NSites
			for i, s := range p.Sites[:min(a.Sites, len(p.Sites))] {
				sj := auditSiteJSON{Blocks: s.Blocks, Bytes: s.Bytes, Frames: []auditFrameJSON{}}
				for _, f := range p.siteFrames(i) {
					sj.Frames = append(sj.Frames, auditFrameJSON{
						PC:       fmt.Sprintf("%#x", f.PC),
						RelPC:    fmt.Sprintf("%#x", f.RelPC),
						File:     f.MapName,
						Function: stacks.Demangle(f.Func),
						Offset:   f.FuncOff,
					})
				}
				pj.Sites = append(pj.Sites, sj)
			}
		}
		j.Ranking = append(j.Ranking, pj)
	}
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

func pluralES(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}
