//go:build linux

package tracer

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/mdtrace/mdtrace/abi"
	"github.com/mdtrace/mdtrace/bpf"
)

// allocatorMappings follows, for each traced process, the anonymous
// mappings its allocator made for itself (bpf/mappings.h): the probes
// report each mmap or mremap made inside an allocator call, and every
// munmap, mremap and fixed mapping, which take their range out again.
// The reachability check reads those mappings as heap, not as roots:
// jemalloc's and tcmalloc's metadata there holds the address of every
// extent, and so of blocks.
type allocatorMappings struct {
	// err says why the mappings are not followed; the rest is unset then.
	err   error
	links []link.Link
	rd    *EventReader[bpf.MdtraceMappingEvent]

	mu   sync.Mutex
	cond *sync.Cond
	// procs holds each process's ranges, sorted and apart.
	procs map[int][][2]uint64
	// woken counts the wakes asked for, read the wakes the reader came
	// back from with every event before them applied.
	woken, read uint64
	// done is set when the reader has stopped.
	done bool
}

// followMappings starts to follow the allocator's mappings, the first
// time a process whose allocator is not glibc's is traced: the program
// runs at the end of every system call on the host, which the check
// needs only for those (glibc's own memory, its arenas' heaps, is known
// by its shape). Where it cannot, the reachability check says so and
// reads all anonymous memory as roots.
func (p *Probes) followMappings() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.allocMaps != nil {
		return
	}
	m := &allocatorMappings{procs: map[int][][2]uint64{}}
	m.cond = sync.NewCond(&m.mu)
	p.allocMaps = m
	if p.mappingsErr != nil {
		m.err = p.mappingsErr
		return
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: p.objs.MappingsExit})
	if err != nil {
		m.err = fmt.Errorf("attaching the system call exit tracepoint: %w", err)
		return
	}
	m.links = []link.Link{l}
	rd, err := newEventReader[bpf.MdtraceMappingEvent](p.objs.Mappings, "allocator mappings")
	if err != nil {
		closeLinks(m.links)
		m.links = nil
		m.err = err
		return
	}
	m.rd = rd
	go m.run()
}

// run applies the events as they come, until the reader is closed.
func (m *allocatorMappings) run() {
	var e bpf.MdtraceMappingEvent
	for {
		err := m.rd.Next(time.Time{}, &e)
		m.mu.Lock()
		switch {
		case err == nil:
			m.apply(&e)
		case errors.Is(err, ErrNoRecord):
			// Woken: every event before the wake is applied.
			m.read = m.woken
			m.cond.Broadcast()
		default:
			m.done = true
			m.cond.Broadcast()
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
}

// apply takes one event into its process's ranges; m.mu is held.
func (m *allocatorMappings) apply(e *bpf.MdtraceMappingEvent) {
	pid := int(e.Tgid)
	if e.Kind == abi.MappingReset {
		delete(m.procs, pid)
		return
	}
	start := e.Start &^ (pageSize - 1)
	end := (e.Start + e.Len + pageSize - 1) &^ (pageSize - 1)
	if end <= start {
		return
	}
	rs := subtractRange(m.procs[pid], start, end)
	if e.Kind == abi.MappingAllocator {
		rs = addRange(rs, start, end)
	}
	if len(rs) == 0 {
		delete(m.procs, pid)
	} else {
		m.procs[pid] = rs
	}
}

const pageSize = 4096

// subtractRange takes [start, end) out of the sorted, disjoint ranges rs.
func subtractRange(rs [][2]uint64, start, end uint64) [][2]uint64 {
	var out [][2]uint64
	for _, r := range rs {
		if r[1] <= start || r[0] >= end {
			out = append(out, r)
			continue
		}
		if r[0] < start {
			out = append(out, [2]uint64{r[0], start})
		}
		if r[1] > end {
			out = append(out, [2]uint64{end, r[1]})
		}
	}
	return out
}

// addRange puts [start, end) into the sorted, disjoint ranges rs, which
// do not overlap it, joining it with the ones it touches.
func addRange(rs [][2]uint64, start, end uint64) [][2]uint64 {
	i, _ := slices.BinarySearchFunc(rs, start, func(r [2]uint64, a uint64) int {
		switch {
		case r[0] < a:
			return -1
		case r[0] > a:
			return 1
		}
		return 0
	})
	rs = slices.Insert(rs, i, [2]uint64{start, end})
	if i+1 < len(rs) && rs[i+1][0] == rs[i][1] {
		rs[i][1] = rs[i+1][1]
		rs = slices.Delete(rs, i+1, i+2)
	}
	if i > 0 && rs[i-1][1] == rs[i][0] {
		rs[i-1][1] = rs[i][1]
		rs = slices.Delete(rs, i, i+1)
	}
	return rs
}

// AllocatorMappings returns the anonymous ranges process pid's allocator
// mapped for itself while it was traced and still has, sorted, with every
// event from before the call applied (the process should be stopped). It
// returns an error where they are not followed, or some were lost: then
// none can be trusted.
func (p *Probes) AllocatorMappings(pid int) ([][2]uint64, error) {
	p.mu.Lock()
	m := p.allocMaps
	p.mu.Unlock()
	if m == nil {
		return nil, errors.New("the allocator's mappings are not followed")
	}
	if m.err != nil {
		return nil, m.err
	}
	m.mu.Lock()
	m.woken++
	want := m.woken
	m.mu.Unlock()
	if err := m.rd.Wake(); err != nil && !errors.Is(err, os.ErrClosed) {
		return nil, fmt.Errorf("reading the allocator's mappings: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.read < want && !m.done {
		m.cond.Wait()
	}
	if m.done {
		return nil, errors.New("the allocator's mappings are no longer read")
	}
	if c, err := p.Counters(); err != nil {
		return nil, err
	} else if c.MappingsLost > 0 {
		return nil, fmt.Errorf("%s of their system calls were lost to a full ring buffer", formatCount(c.MappingsLost))
	}
	return slices.Clone(m.procs[pid]), nil
}

// followed returns the mappings followed, nil if they are not.
func (p *Probes) followed() *allocatorMappings {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.allocMaps; m != nil && m.err == nil {
		return m
	}
	return nil
}

// forgetMappings drops what is known of process pid's mappings.
func (p *Probes) forgetMappings(pid int) {
	m := p.followed()
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.procs, pid)
	m.mu.Unlock()
}

// stopMappings stops following the mappings: their probes go, the reader
// stops.
func (p *Probes) stopMappings() {
	m := p.followed()
	if m == nil {
		return
	}
	m.mu.Lock()
	links := m.links
	m.links = nil
	m.mu.Unlock()
	closeLinks(links)
	if m.rd != nil {
		m.rd.Close()
	}
}
