//go:build linux

package session

import (
	"fmt"

	"github.com/mdtrace/mdtrace/stacks"
	"github.com/mdtrace/mdtrace/tracer"
)

// injectLoad loads the shim into the attached process p (--inject), whose
// allocator is in lib.
func (s *session) injectLoad(p *proc, lib stacks.File) (*tracer.Injected, error) {
	if !stacks.IsLibc(lib.Name) {
		return nil, fmt.Errorf("--inject routes calls of glibc's allocator; process %d's is %s (without --inject, -p probes it)", p.pid, lib.Name)
	}
	shim, err := shimPath(s.flags)
	if err != nil {
		return nil, fmt.Errorf("--inject: %w", err)
	}
	depth, batch := s.probes.BatchDepth()
	in, err := tracer.InjectLoad(p.pid, shim, batch, depth, s.flags.SampleBytes, nil)
	if err != nil {
		return nil, fmt.Errorf("--inject: %w", err)
	}
	return in, nil
}

// inject routes the calls of process p to the allocator in lib through the
// shim's hooks and batches: the shim's probe sites are probed first, then,
// in one stop of every thread, the calls are routed and the probes on the
// allocator taken away.
func (s *session) inject(p *proc, lib stacks.File, in *tracer.Injected) error {
	if err := s.probes.Attach(p.pid, in.Shim); err != nil {
		return fmt.Errorf("--inject: probing the shim's sites: %w", err)
	}
	if in.Pending != 0 {
		if err := s.probes.CountPending(p.pid, in.Pending); err != nil {
			return fmt.Errorf("--inject: %w", err)
		}
	}
	routed, unrouted, inside, err := in.Route(func() {
		s.probes.DetachFile(p.pid, lib)
		if s.flags.SampleBytes > 0 {
			// The probes on the allocator saw every call until now;
			// from here only the sampled ones come, and a block of
			// before would be weighed as sampled, and its free never
			// seen. Those blocks go: they are from before the attach.
			if err := s.probes.Forget(p.pid); err != nil {
				s.notice("--inject: %v", err)
			}
		}
	})
	if err != nil {
		// Whatever the shim routed goes back.
		in.Stop()
		return fmt.Errorf("--inject: %w", err)
	}
	if routed == 0 {
		in.Stop()
		return fmt.Errorf("--inject: process %d calls the allocator through no GOT slot the shim could route (a statically linked allocator?)", p.pid)
	}
	if inside > 0 {
		s.notice("--inject: %d threads of process %d were inside a call of the allocator at every stop tried: those calls may be missed", inside, p.pid)
	}
	s.injected = in
	s.injectRouted, s.injectUnrouted = routed, unrouted
	return nil
}

// injectedLine says what --inject routes, and what it does not.
func (s *session) injectedLine() string {
	line := fmt.Sprintf("the shim loaded with --inject takes malloc, free, calloc, realloc, reallocarray, memalign, aligned_alloc, posix_memalign, valloc and pvalloc through %d GOT slots", s.injectRouted)
	if _, batch := s.probes.BatchDepth(); batch {
		line += ", in batches"
	}
	if s.flags.SampleBytes > 0 {
		line += fmt.Sprintf(", sampling one allocation every %d bytes on average (block counts and byte totals in the reports are estimates, sizes are exact)", s.flags.SampleBytes)
	}
	line += "; the allocator itself is no longer probed (calls through a function pointer taken before, and the loader's own, are not seen)"
	if s.injectUnrouted > 0 {
		line += fmt.Sprintf("; %d slots could not be routed: their calls are not seen", s.injectUnrouted)
	}
	return line
}

// uninject gives the process's calls back to the allocator before
// mdtrace lets it go.
func (s *session) uninject() {
	if s.injected == nil {
		return
	}
	n, err := s.injected.Stop()
	s.probes.CountPending(s.injected.PID, 0)
	if err != nil {
		s.notice("--inject: giving process %d's calls back to the allocator: %v", s.injected.PID, err)
		return
	}
	fmt.Fprintf(s.stderr, "mdtrace: --inject: %d GOT slots of process %d given back to the allocator\n", n, s.injected.PID)
	s.injected = nil
}
