//go:build linux

package tracer

import (
	"fmt"

	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/mdtrace/mdtrace/bpf"
)

// signalSlots is SIGNAL_SLOTS of bpf/signals.bpf.c: how many signal
// numbers, from the first, are counted.
const signalSlots = 8

// SignalCounter counts the signals generated for one process, by number,
// in the kernel: the Go runtime merges a signal that comes again before
// the program has taken it, and the counts say how many came.
type SignalCounter struct {
	objs  bpf.SignalsObjects
	link  link.Link
	first int
	last  int
}

// CountSignals counts the signals first to last (at most 8 of them) that
// are queued for process tgid from now on.
func CountSignals(tgid, first, last int) (*SignalCounter, error) {
	if last < first || last-first >= signalSlots {
		return nil, fmt.Errorf("counting signals %d to %d: at most %d", first, last, signalSlots)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("counting signals: removing the memlock limit: %w", err)
	}
	spec, err := bpf.LoadSignals()
	if err != nil {
		return nil, fmt.Errorf("counting signals: %w", err)
	}
	if err := spec.Variables["signal_tgid"].Set(uint32(tgid)); err != nil {
		return nil, fmt.Errorf("counting signals: %w", err)
	}
	if err := spec.Variables["signal_first"].Set(uint32(first)); err != nil {
		return nil, fmt.Errorf("counting signals: %w", err)
	}
	c := &SignalCounter{first: first, last: last}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("counting signals: loading the BPF program: %w", err)
	}
	c.link, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "signal_generate", Program: c.objs.CountSignal})
	if err != nil {
		c.objs.Close()
		return nil, fmt.Errorf("counting signals: attaching to signal_generate: %w", err)
	}
	return c, nil
}

// Count is how many times signal sig was queued for the process since
// CountSignals; 0 for a signal not counted.
func (c *SignalCounter) Count(sig int) (uint64, error) {
	if sig < c.first || sig > c.last {
		return 0, nil
	}
	slot := uint32(sig - c.first)
	var n uint64
	if err := c.objs.SignalCounts.Lookup(slot, &n); err != nil {
		return 0, fmt.Errorf("reading the count of signal %d: %w", sig, err)
	}
	return n, nil
}

// Close stops counting.
func (c *SignalCounter) Close() error {
	err := c.link.Close()
	if cerr := c.objs.Close(); err == nil {
		err = cerr
	}
	return err
}
