//go:build linux

package tracer

import (
	"debug/elf"
	"sync"

	"github.com/mdtrace/mdtrace/unwind"
)

// Unwind tables parsed ahead. A launched command's tables are placed once
// the probes are loaded, and its first call that needs a walk by the
// probes waits for them (a held command waits at its exec): parsing a
// large program's call frame information (gcc's cc1plus: 2.6 MB of
// .eh_frame, 517,000 entries, 0.2 s) after the verifier's work made the
// command wait for both, one after the other. ParseUnwindAhead starts the
// parse as mdtrace starts, beside the programs' load; the table's placing
// in the kernel's maps stays where it was.

// aheadJob is one file's parse.
type aheadJob struct {
	done chan struct{}
	tab  *unwind.Table
	err  error
}

var ahead = struct {
	mu   sync.Mutex
	jobs map[fileID]*aheadJob
}{jobs: map[fileID]*aheadJob{}}

// maxAhead bounds the files parsed ahead at once and not taken yet.
const maxAhead = 64

// ParseUnwindAhead starts making the unwind tables of the files at paths,
// in the background: the executable and libraries of a command about to
// be launched. A file changed since is parsed again when it is placed.
func ParseUnwindAhead(paths []string) {
	ahead.mu.Lock()
	defer ahead.mu.Unlock()
	for _, path := range paths {
		id, ok := statID(path)
		if !ok || ahead.jobs[id] != nil || len(ahead.jobs) >= maxAhead {
			continue
		}
		j := &aheadJob{done: make(chan struct{})}
		ahead.jobs[id] = j
		go func() {
			defer close(j.done)
			f, err := elf.Open(path)
			if err != nil {
				j.err = err
				return
			}
			defer f.Close()
			j.tab, j.err = unwind.FromELF(f)
		}()
	}
}

// takeAhead returns the table parsed ahead for the file id, waiting for
// its parse to end; false when none was started. Each is taken once.
func takeAhead(id fileID) (*unwind.Table, error, bool) {
	ahead.mu.Lock()
	j := ahead.jobs[id]
	delete(ahead.jobs, id)
	ahead.mu.Unlock()
	if j == nil {
		return nil, nil, false
	}
	<-j.done
	return j.tab, j.err, true
}

// tableOf returns the table of the ELF file ef, whose id is id if known:
// the one parsed ahead, or made now.
func tableOf(id fileID, known bool, ef *elf.File) (*unwind.Table, error) {
	if known {
		if tab, err, ok := takeAhead(id); ok {
			return tab, err
		}
	}
	return unwind.FromELF(ef)
}

// DropUnwindAhead forgets the tables parsed ahead and not taken: the
// launched command is placed, and took those it maps.
func DropUnwindAhead() {
	ahead.mu.Lock()
	ahead.jobs = map[fileID]*aheadJob{}
	ahead.mu.Unlock()
}
