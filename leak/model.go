package leak

// Alloc is one live allocation of a traced process. Its fields are in the
// order that packs it in 32 bytes: a million of them is 32 MB.
type Alloc struct {
	// Ptr is the address returned to the program.
	Ptr uint64
	// Size is the size the program asked for.
	Size uint64
	// StackID names the allocation's backtrace in Snapshot.Stacks. Zero means
	// that no backtrace was taken (backtracing off, or the size was outside
	// backtrace_min_size..backtrace_max_size).
	StackID uint64
	// Zygote is set for allocations made by a process forked (without exec)
	// from a traced process, after the fork.
	Zygote bool
	// While Snapshot.Sort runs, the length of the backtrace and the index
	// in Snapshot.Allocs, which it sorts by; zero otherwise. They take
	// room the fields above leave unused.
	sortLen uint16
	sortIdx uint32
}

// Snapshot is the live allocation table of one process at one moment.
type Snapshot struct {
	// PID is the process the table belongs to.
	PID int
	// Allocs are the live allocations, in no particular order.
	Allocs []Alloc
	// Stacks maps a stack id to its frames, innermost first. Each frame is
	// a return address minus one, as Android's malloc debug stores them,
	// so that it falls inside the calling instruction.
	Stacks map[uint64][]uint64
	// BacktraceSize is the maximum number of frames a backtrace may have
	// (the value of the backtrace option).
	BacktraceSize int
	// SampleBytes, when not 0, says that Allocs are a sample: each
	// allocation was kept with a probability that grows with its size
	// (see Weight), and the counts derived from them are estimates.
	SampleBytes uint64
}

// Frames returns the frames of a's backtrace, or nil when it has none.
func (s *Snapshot) Frames(a *Alloc) []uint64 {
	if a.StackID == 0 || s.Stacks == nil {
		return nil
	}
	return s.Stacks[a.StackID]
}
