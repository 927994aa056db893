//go:build linux

package tracer

import (
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/mdtrace/mdtrace/bpf"
)

// Cleaning up after processes that ended is costly one by one: removing a
// process's blocks walks the whole live table (2 ms for the default 4M
// entries here, however few blocks it holds), and closing its uprobe links
// waits for kernel grace periods during which the kernel holds back every
// fork on the machine. A build under mdtrace ends hundreds of processes a
// second. So Release only takes a process out of the maps the probes
// consult, and leaves its blocks and links to a cleaner that handles many
// processes at once: after retireDelay, or as soon as retireBatch are
// waiting.
const (
	retireDelay = 200 * time.Millisecond
	retireBatch = 64
)

// retiring are the processes released and not yet cleaned up, and those
// whose blocks from before an exec are still in the table.
type retiring struct {
	pids  map[int]bool
	execs map[int]bool
	links []link.Link
}

// cleaner runs cleanRetired in the background.
type cleaner struct {
	wake, stop chan struct{}
	done       chan struct{}
}

// Release lets process pid go once it has ended (or is held at its exit,
// its reports written): the probes stop counting it at once, and its blocks
// in the live table and its uprobes are removed in the background, with
// those of other processes that ended about the same time. Until then its
// blocks take room in the table; a process that gets pid again (Attach,
// Fork) waits for them to be gone first. Detach closes what is left.
func (p *Probes) Release(pid int) {
	p.mu.Lock()
	links := p.links[pid]
	delete(p.links, pid)
	delete(p.attached, pid)
	delete(p.points, pid)
	delete(p.probed, pid)
	delete(p.fileLinks, pid)
	delete(p.watched, pid)
	delete(p.early, pid)
	if p.retired.pids == nil {
		p.retired.pids = map[int]bool{}
	}
	p.retired.pids[pid] = true
	p.retired.links = append(p.retired.links, links...)
	full := len(p.retired.pids) >= retireBatch
	c := p.startCleanerLocked()
	p.mu.Unlock()
	p.Untrace(pid)
	p.forgetUnwind(pid)
	if full {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// CloseLinks closes the probes of process pid now, in the background,
// rather than with the other processes' later: for a process held at its
// exit, whose probes can fire no more, while its reports are written.
// Closing them waits for kernel grace periods (60 to 80 ms at the end of a
// run here), which mdtrace's exit then does not wait for after the
// reports. Detach waits for them.
func (p *Probes) CloseLinks(pid int) {
	p.mu.Lock()
	links := p.links[pid]
	delete(p.links, pid)
	p.forgetReturnsLocked(links)
	p.mu.Unlock()
	p.closeLater(links)
}

// startCleanerLocked starts the cleaner if it is not running; p.mu held.
func (p *Probes) startCleanerLocked() *cleaner {
	if p.cleaner == nil {
		p.cleaner = &cleaner{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
		go p.cleaner.run(p, p.retireEvery)
	}
	return p.cleaner
}

func (c *cleaner) run(p *Probes, every time.Duration) {
	defer close(c.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		case <-t.C:
		}
		p.cleanRetired()
	}
}

// stopCleaner stops the background cleanup; the links it had not closed
// stay in p.retired.
func (p *Probes) stopCleaner() {
	p.mu.Lock()
	c := p.cleaner
	p.cleaner = nil
	p.mu.Unlock()
	if c != nil {
		close(c.stop)
		<-c.done
	}
}

// cleanRetired removes the blocks of the processes released so far, and
// those of the programs before an exec, in one walk of the table, and
// closes the links of the processes released in the background.
func (p *Probes) cleanRetired() {
	p.cleanMu.Lock()
	defer p.cleanMu.Unlock()
	p.cleanRetiredLocked()
}

func (p *Probes) cleanRetiredLocked() {
	p.mu.Lock()
	pids, execs, links := p.retired.pids, p.retired.execs, p.retired.links
	p.retired = retiring{}
	p.forgetReturnsLocked(links)
	p.cleaning = pids
	if len(links) > 0 {
		p.closing.Add(1)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.cleaning = nil
		p.mu.Unlock()
	}()
	if len(links) > 0 {
		go func() {
			defer p.closing.Done()
			closeLinks(links)
		}()
	}
	if len(pids) == 0 && len(execs) == 0 {
		return
	}
	// A failure leaves blocks of ended processes, or of programs before
	// an exec, in the table: room lost, not blocks misreported, as the
	// readers skip them.
	current, err := p.currentGens()
	if err != nil {
		return
	}
	p.dropTables(func(k *bpf.MdtraceAllocKey) bool {
		return pids[int(k.Tgid)] || execs[int(k.Tgid)] && !current(k)
	}, pids)
}

// reclaim makes sure that no block of an ended process pid is left in the
// table before pid is traced again: PIDs are reused (after 32768 on many
// machines). It waits only when pid is waiting for the cleaner or being
// cleaned up.
func (p *Probes) reclaim(pid int) {
	p.mu.Lock()
	busy := p.retired.pids[pid] || p.cleaning[pid]
	p.mu.Unlock()
	if !busy {
		return
	}
	p.cleanMu.Lock()
	defer p.cleanMu.Unlock()
	p.mu.Lock()
	pending := p.retired.pids[pid]
	p.mu.Unlock()
	if pending {
		p.cleanRetiredLocked()
	}
}
