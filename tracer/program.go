//go:build linux

package tracer

import (
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// MaxProgramName bounds the program name of program mode, with its NUL.
const MaxProgramName = abi.ProgramNameMax

// ProgramExec is a process that program mode traces from now on: it
// executed a matching program, or a traced process forked it.
type ProgramExec struct {
	PID    int
	Parent int    // for a fork, the traced process that forked it; 0 for an exec
	Path   string // for an exec, the path it executed, as given to execve
}

// ProgramReader reads the processes that program mode starts tracing.
type ProgramReader struct {
	r  *EventReader[bpf.MdtraceExecEvent]
	ev bpf.MdtraceExecEvent
}

// WatchPrograms starts program mode (the probes must be loaded with
// ProbeConfig.Program): from now on a process that executes a matching
// program is traced from its first instruction, and so are the children
// it forks, by the probes attached without a PID; the reader tells of
// each matching exec.
func (p *Probes) WatchPrograms() (*ProgramReader, error) {
	r, err := newEventReader[bpf.MdtraceExecEvent](p.objs.Execs, "exec")
	if err != nil {
		return nil, err
	}
	var links []link.Link
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_fork", p.objs.ProgramFork}, {"sched_process_exec", p.objs.ProgramExec}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog})
		if err != nil {
			closeLinks(links)
			r.Close()
			return nil, fmt.Errorf("attaching the %s tracepoint: %w", tp.name, err)
		}
		links = append(links, l)
	}
	p.mu.Lock()
	p.programLinks = append(p.programLinks, links...)
	p.mu.Unlock()
	return &ProgramReader{r: r}, nil
}

// Next returns the next matching exec, waiting until deadline at the most
// (ErrNoRecord when none came; os.ErrClosed once closed).
func (r *ProgramReader) Next(deadline time.Time) (ProgramExec, error) {
	if err := r.r.Next(deadline, &r.ev); err != nil {
		return ProgramExec{}, err
	}
	return ProgramExec{PID: int(r.ev.Tgid), Parent: int(r.ev.Parent), Path: cString(r.ev.Name[:])}, nil
}

// Close stops the reader.
func (r *ProgramReader) Close() error { return r.r.Close() }

// IsTraced reports whether program mode traces process pid.
func (p *Probes) IsTraced(pid int) bool {
	var v uint32
	return p.objs.Traced.Lookup(uint32(pid), &v) == nil
}

// Untrace removes process pid from the traced processes, and its entries
// in the maps the probes consult, when it has exited or (program mode) left
// the program: its PID may be reused.
func (p *Probes) Untrace(pid int) {
	p.objs.Traced.Delete(uint32(pid))
	p.objs.Zygotes.Delete(uint32(pid))
	p.objs.Gens.Delete(uint32(pid))
	p.objs.Rdebug.Delete(uint32(pid))
	p.objs.ShimSamples.Delete(uint32(pid))
	p.forgetMappings(pid)
}

// WatchAllExecs makes every process's exec start a new program, whose
// blocks alone Totals counts, for --all (the probes must be loaded with
// ProbeConfig.All): a process's blocks from before its exec (a shell's,
// forked to run a command) are no longer its. The probes must be attached
// (Attach with PID 0) first.
func (p *Probes) WatchAllExecs() error {
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_fork", Program: p.objs.ProgramFork})
	if err != nil {
		return fmt.Errorf("attaching the sched_process_fork tracepoint: %w", err)
	}
	p.mu.Lock()
	p.programLinks = append(p.programLinks, l)
	p.mu.Unlock()
	return nil
}

// ForgetExited drops the gens (see gens.go) and the lists of mappings
// (unwind.go) of the processes that have exited, so that those maps, as
// big as the map of processes, keep room for the living ones under --all.
// alive reports whether a PID is a living process.
func (p *Probes) ForgetExited(alive func(pid int) bool) {
	var (
		tgid, gen uint32
		gone      []uint32
		it        = p.objs.Gens.Iterate()
	)
	for it.Next(&tgid, &gen) {
		if !alive(int(tgid)) {
			gone = append(gone, tgid)
		}
	}
	for _, t := range gone {
		p.objs.Gens.Delete(t)
	}
	if p.unwind == nil {
		return
	}
	// The keys alone: a list is kilobytes.
	gone = gone[:0]
	var key, next uint32
	for at := any(nil); p.unwind.procs.NextKey(at, &next) == nil; at = &key {
		key = next
		if !alive(int(key)) {
			gone = append(gone, key)
		}
	}
	for _, t := range gone {
		p.forgetUnwind(int(t))
	}
}
