//go:build linux

package tracer

import (
	"encoding/binary"

	"github.com/mdtrace/mdtrace/bpf"
)

// The walk of bpf/unwind.h and bpf/stack.h, in Go, for the walks the
// probes left to mdtrace to finish (deferred.go): the same list of a
// process's mappings, the same tables, the same rules, read from a copy
// of the thread's stack instead of its memory. Each function mirrors the
// C one it names; a change to one is a change to both.

// What a step of the walk did (enum unwind_step).
const (
	stepOn = iota
	stepDone
	stepStop
	stepNoTable
	stepUnknown
	stepNoFDE
)

// Where glibc's signal frame keeps the interrupted registers, from rsp
// (SIGNAL_RBP, SIGNAL_RSP, SIGNAL_RIP).
const (
	signalRBP = 120
	signalRSP = 160
	signalRIP = 168
)

// The bounds a frame-pointer step and a return address are held to
// (STACK_SPAN, USER_TOP, USER_BOTTOM in bpf/stack.h).
const (
	stackSpan  = 8 << 20
	userTop    = 1 << 47
	userBottom = 4096
)

// The fields of a packed rule (bpf/unwind.h).
const (
	whyEnd   = 1 // UNWIND_END_OF_STACK
	whyNoFDE = 2 // UNWIND_NO_FDE
)

// ruleSource gives a file's table's entries by the table's number.
type ruleSource interface {
	entry(table, i uint32) (bpf.MdtraceUnwindEntry, bool)
}

// stackCopy is the part of a thread's stack a deferred walk copied: the
// bytes from base up.
type stackCopy struct {
	base uint64
	b    []byte
}

// word reads the 8 bytes at addr; false when they are not in the copy.
func (s *stackCopy) word(addr uint64) (uint64, bool) {
	if addr < s.base || addr-s.base > uint64(len(s.b)) || uint64(len(s.b))-(addr-s.base) < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(s.b[addr-s.base:]), true
}

// walkRegs is struct unwind_regs: the frame's ip, sp and rbp, whether ip
// is where the frame stands rather than a return address, and 1 + the
// index of the mapping known to hold ip (0: not known).
type walkRegs struct {
	ip, sp, fp uint64
	exact      bool
	hint       int
}

// findMappingOf is find_mapping: the index of the process's executable
// file mapping that holds pc, -1 if none.
func findMappingOf(up *bpf.MdtraceUnwindProc, pc uint64) int {
	n := min(int(up.N), len(up.M))
	if up.Unsorted != 0 {
		for i := range n {
			if up.M[i].Start <= pc && pc < up.M[i].End {
				return i
			}
		}
		return -1
	}
	// The last that starts at or before pc.
	lo, hi := 0, n
	for lo < hi {
		mid := (lo + hi) / 2
		if up.M[mid].Start <= pc {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 || pc >= up.M[lo-1].End {
		return -1
	}
	return lo - 1
}

// unwindStepOf is unwind_step: one frame of a walk by the tables, from the
// frame at r.ip to its caller's. A read outside the copy stops the walk,
// and says so (short).
func unwindStepOf(up *bpf.MdtraceUnwindProc, rules ruleSource, mem *stackCopy, r *walkRegs) (step int, short bool) {
	idx := -1
	if k := r.hint; k > 0 && k <= len(up.M) {
		if m := &up.M[k-1]; m.Start <= r.ip && r.ip < m.End {
			idx = k - 1
		}
	}
	r.hint = 0
	if idx < 0 {
		idx = findMappingOf(up, r.ip)
	}
	if idx < 0 {
		return stepUnknown, false
	}
	m := &up.M[idx]
	if m.Count == 0 {
		return stepNoTable, false
	}
	pc := r.ip - m.Bias
	if !r.exact {
		pc--
	}
	if pc>>32 != 0 {
		return stepNoTable, false
	}
	// The rule: the last entry of the file's table at or before pc.
	lo, hi := uint32(0), m.Count
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, ok := rules.entry(m.Table, mid)
		if !ok {
			return stepNoTable, false
		}
		if e.Pc <= uint32(pc) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return stepNoTable, false
	}
	e, ok := rules.entry(m.Table, lo-1)
	if !ok {
		return stepNoTable, false
	}
	rule := e.Rule
	off := uint64(rule>>6) & 0xffff
	var cfa uint64
	switch rule & 7 {
	case ruleRSP:
		cfa = r.sp + off
	case ruleRBP:
		cfa = r.fp + off
	case rulePLT:
		cfa = r.sp + 8
		if r.ip&15 >= off {
			cfa += 8
		}
	case ruleSignal:
		// The interrupted code's registers, in the ucontext at sp.
		rsp, ok1 := mem.word(r.sp + signalRSP)
		rip, ok2 := mem.word(r.sp + signalRIP)
		rbp, ok3 := mem.word(r.sp + signalRBP)
		if !ok1 || !ok2 || !ok3 {
			return stepStop, true
		}
		r.fp, r.sp, r.ip, r.exact = rbp, rsp, rip, true
		return stepOn, false
	default:
		why := (rule >> 3) & 7
		if why == whyEnd {
			return stepDone, false
		}
		if why == whyNoFDE {
			// The loader's start zeroes rbp: the outermost frame.
			if m.Loader != 0 && r.fp == 0 {
				return stepDone, false
			}
			return stepNoFDE, false
		}
		return stepStop, false
	}
	if (rule>>3)&7 == whyEnd {
		return stepDone, false
	}
	words := uint64(rule>>22) & 0xff
	ra, ok := mem.word(cfa - 8)
	if !ok {
		return stepStop, true
	}
	if words != 0 {
		fp, ok := mem.word(cfa - 8*words)
		if !ok {
			return stepStop, true
		}
		r.fp = fp
	}
	if ra == 0 {
		return stepDone, false
	}
	r.ip, r.sp, r.exact = ra, cfa, false
	return stepOn, false
}

// fpStepOf is fp_step: one frame-pointer step, the record at r.fp the
// caller's frame pointer and then the return address. Returns true when
// the walk ends, with short when it ends at the copy's end.
func fpStepOf(mem *stackCopy, r *walkRegs, sp0 uint64) (end, short bool) {
	fp := r.fp
	if fp&7 != 0 || fp < sp0 || fp-sp0 >= stackSpan || fp < r.sp {
		return true, false
	}
	next, ok1 := mem.word(fp)
	ret, ok2 := mem.word(fp + 8)
	if !ok1 || !ok2 {
		return true, true
	}
	if ret < userBottom || ret >= userTop {
		return true, false
	}
	r.ip, r.sp, r.fp, r.exact = ret, fp+16, next, false
	return false, false
}

// How a walk finished in Go ended.
const (
	walkComplete  = iota // at the outermost frame, or where the probes' walk would end uncounted
	walkTruncated        // cut at the frame limit with frames left
	walkStopped          // cut short where the tables could not go on
	walkShort            // cut short at the end of the stack's copy
)

// finishWalkOf goes on with a walk the probes stopped, whose frames so far
// are frames, from r (at a caller found but not kept yet when caller is
// set), to at most depth frames: walk_step's loop. sp0 is the stack
// pointer the walk began at.
func finishWalkOf(up *bpf.MdtraceUnwindProc, rules ruleSource, mem *stackCopy, frames []uint64, r walkRegs, caller bool, sp0 uint64, depth int) ([]uint64, int) {
	for {
		if !caller {
			full := len(frames) >= depth
			unknown := false
			step, short := unwindStepOf(up, rules, mem, &r)
			switch step {
			case stepOn:
			case stepNoTable:
			case stepUnknown, stepNoFDE:
				unknown = true
			case stepStop:
				switch {
				case full:
					return frames, walkComplete
				case short:
					return frames, walkShort
				}
				return frames, walkStopped
			default:
				return frames, walkComplete
			}
			if step != stepOn {
				if end, short := fpStepOf(mem, &r, sp0); end {
					switch {
					case full:
						return frames, walkComplete
					case short:
						// The probes would have read on: not known.
						return frames, walkShort
					case !unknown:
						return frames, walkComplete
					}
					return frames, walkStopped
				}
			}
		}
		caller = false
		// found:
		if r.ip < userBottom || r.ip >= userTop {
			return frames, walkComplete
		}
		if len(frames) >= depth {
			if findMappingOf(up, r.ip) >= 0 {
				return frames, walkTruncated
			}
			return frames, walkComplete
		}
		// A return address is believed only in an executable file mapping.
		idx := findMappingOf(up, r.ip)
		if idx < 0 {
			return frames, walkStopped
		}
		r.hint = idx + 1
		frames = append(frames, r.ip)
	}
}
