//go:build linux

package tracer

import (
	"errors"
	"time"

	"github.com/cilium/ebpf"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// Walks the probes left for mdtrace to finish (struct defer_event in
// bpf/stack.h): a walk that reached code in no mapping of its process's
// list while the loader's notice had changed the list, a library
// dlopen'ed a moment ago whose table mdtrace was still loading. The
// probes stored its frames so far under an id of its own and sent the
// registers where it stopped with a copy of the stack above them; once
// the process's list is rewritten with the library's table, mdtrace goes
// on with the walk (unwindstep.go) and rewrites the id's frames.

// deferTimeout is how long a deferred walk waits for its process's list
// to be rewritten before it is finished with what there is.
const deferTimeout = 2 * time.Second

// The kinds of DEFER_AT_* in bpf/stack.h.
const deferAtCaller = 2

// DeferredWalk is a walk the probes left for mdtrace to finish.
type DeferredWalk struct {
	PID      int
	id       uint64
	regs     walkRegs
	caller   bool
	sp0      uint64
	frames   []uint64
	stack    []byte
	received time.Time
	// execs is the process's count of execs when FinishWalk first saw
	// the walk (seen): one since, and the list is another program's.
	execs int
	seen  bool
}

// DeferReader reads the walks the probes left for mdtrace to finish.
type DeferReader struct {
	r  *EventReader[bpf.MdtraceDeferEvent]
	ev bpf.MdtraceDeferEvent
}

// DeferredWalks opens the reader of deferred walks.
func (p *Probes) DeferredWalks() (*DeferReader, error) {
	r, err := newEventReader[bpf.MdtraceDeferEvent](p.objs.Deferred, "deferred walk")
	if err != nil {
		return nil, err
	}
	return &DeferReader{r: r}, nil
}

// Next returns the next deferred walk, waiting until deadline at the most
// (ErrNoRecord when none came; os.ErrClosed once closed).
func (d *DeferReader) Next(deadline time.Time) (*DeferredWalk, error) {
	if err := d.r.Next(deadline, &d.ev); err != nil {
		return nil, err
	}
	e := &d.ev
	n := min(int(e.Nr), len(e.Ips))
	w := &DeferredWalk{
		PID:      int(e.Tgid),
		id:       e.Id,
		regs:     walkRegs{ip: e.Ip, sp: e.Sp, fp: e.Fp, exact: e.Exact != 0},
		caller:   e.At == deferAtCaller,
		sp0:      e.Sp0,
		frames:   append([]uint64(nil), e.Ips[:n]...),
		stack:    append([]byte(nil), e.Stack[:min(int(e.Len), len(e.Stack))]...),
		received: time.Now(),
	}
	return w, nil
}

// Close stops the reader.
func (d *DeferReader) Close() error { return d.r.Close() }

// Queued reports whether walks were sent that Next has not read yet.
func (d *DeferReader) Queued() bool { return d.r.Queued() > 0 }

// Wake ends a wait of Next (see EventReader.Wake).
func (d *DeferReader) Wake() error { return d.r.Wake() }

// mapRules reads the entries of the files' tables from the probes' maps,
// each table opened once by its id.
type mapRules struct {
	outer *ebpf.Map
	open  map[uint32]*ebpf.Map
}

func (m *mapRules) entry(table, i uint32) (bpf.MdtraceUnwindEntry, bool) {
	var e bpf.MdtraceUnwindEntry
	t, ok := m.open[table]
	if !ok {
		var id uint32
		if err := m.outer.Lookup(table, &id); err == nil {
			t, _ = ebpf.NewMapFromID(ebpf.MapID(id))
		}
		m.open[table] = t
	}
	if t == nil || t.Lookup(i, &e) != nil {
		return e, false
	}
	return e, true
}

func (m *mapRules) close() {
	for _, t := range m.open {
		if t != nil {
			t.Close()
		}
	}
}

// DeferCounts are the outcomes of the walks the probes left to mdtrace:
// finished, or not, which Counters.UnwindStopped counts with the probes'
// own (and Cut, Counters.StackTruncated).
type DeferCounts struct {
	Finished uint64 // walked on to their outermost frame or to the frame limit
	Cut      uint64 // of those, cut at the frame limit with frames left
	Stopped  uint64 // stopped where the tables could not go on, or the list never had the library
	Short    uint64 // stopped at the end of the stack's copy
	Gone     uint64 // their process's list was gone: left as the probes stopped them
}

// DeferredCounts returns the outcomes of the walks the probes left to
// mdtrace so far.
func (p *Probes) DeferredCounts() DeferCounts {
	p.deferMu.Lock()
	defer p.deferMu.Unlock()
	return p.defers
}

// FinishWalk finishes w once its process's list of mappings is up to date
// (rewritten by LoadUnwind since the loader's notice, and holding the
// code the walk stopped at), and rewrites its id's frames; it returns
// false when the list is not up to date yet, to be called again. With
// final, or after deferTimeout, it finishes w with the list as it is.
func (p *Probes) FinishWalk(w *DeferredWalk, final bool) bool {
	if p.unwind == nil || p.stackDepth == 0 {
		return true
	}
	p.deferMu.Lock()
	execs := p.deferExecs[w.PID]
	p.deferMu.Unlock()
	if !w.seen {
		w.seen, w.execs = true, execs
	}
	var up bpf.MdtraceUnwindProc
	if execs != w.execs {
		p.deferMu.Lock()
		p.defers.Gone++
		p.deferMu.Unlock()
		return true
	}
	if err := p.unwind.procs.Lookup(uint32(w.PID), &up); err != nil {
		if !final && time.Since(w.received) < deferTimeout && errors.Is(err, ebpf.ErrKeyNotExist) {
			return false
		}
		p.deferMu.Lock()
		p.defers.Gone++
		p.deferMu.Unlock()
		return true
	}
	ready := up.Unsorted == 0 && findMappingOf(&up, w.regs.ip) >= 0
	if !ready && !final && time.Since(w.received) < deferTimeout {
		return false
	}
	rules := &mapRules{outer: p.unwind.tables, open: map[uint32]*ebpf.Map{}}
	defer rules.close()
	frames, end := finishWalkOf(&up, rules, &stackCopy{base: w.regs.sp, b: w.stack}, w.frames, w.regs, w.caller, w.sp0, p.stackDepth)
	buf := make([]byte, 8*p.stackDepth)
	for i, f := range frames {
		le64put(buf[8*i:], f)
	}
	p.deferMu.Lock()
	defer p.deferMu.Unlock()
	if len(frames) > len(w.frames) {
		if err := p.objs.Stacks.Update(w.id, buf, ebpf.UpdateExist); err != nil {
			// The id's frames stay those the probes stored.
			end = walkStopped
		}
	}
	switch end {
	case walkComplete, walkTruncated:
		p.defers.Finished++
		if end == walkTruncated {
			p.defers.Cut++
		}
		// Whole, it is the backtrace the probes would have taken had
		// they had the table: the id they would have given it names
		// it in snapshots, so that it is one site with its likes.
		if p.deferIDs == nil {
			p.deferIDs = map[uint64]uint64{}
		}
		p.deferIDs[w.id] = stackHash(frames, end == walkTruncated)
	case walkShort:
		p.defers.Short++
	default:
		p.defers.Stopped++
	}
	return true
}

// finishedID is the id the probes' own walk gives the frames of deferred
// walk id that mdtrace finished (its hash, cut or not); false for another
// id, or a walk not finished, which keeps an id of its own: its frames
// end early, it is never one with a whole backtrace.
func (p *Probes) finishedID(id uint64) (uint64, bool) {
	if id&abi.StackIDDeferred == 0 {
		return 0, false
	}
	p.deferMu.Lock()
	defer p.deferMu.Unlock()
	h, ok := p.deferIDs[id]
	return h, ok
}

func le64put(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}
