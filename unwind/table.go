// Package unwind turns an x86-64 ELF file's call frame information
// (.eh_frame, or .debug_frame from its debug file) into a compact unwind
// table: for each range of addresses, how to find the caller's frame
// without frame pointers. The BPF programs walk stacks with these tables;
// the rules that matter on x86-64 are few (the CFA is rsp or rbp plus an
// offset, the return address is at CFA-8, rbp is saved at CFA-N or
// unchanged), and every other rule is kept as a stop with its reason, never
// guessed. It needs no kernel.
package unwind

import (
	"fmt"
	"slices"
)

// CFA bases of a rule.
const (
	// BaseRSP and BaseRBP: the CFA is the register plus Rule.Offset.
	BaseRSP = 0
	BaseRBP = 1
	// BasePLT: a PLT stub's expression, CFA = rsp + 8, plus 8 when the
	// pc's low four bits are 11 or more (after the stub's push).
	BasePLT = 2
	// BaseNone: no rule the walk can follow; Stop says why.
	BaseNone = 3
	// BaseSignal: a signal frame (glibc's __restore_rt): the interrupted
	// code's rip, rsp and rbp are saved at rsp plus RA, Offset and RBP,
	// in the ucontext.
	BaseSignal = 4
)

// Why a rule stops a walk.
const (
	StopNone        = 0
	StopEnd         = 1 // the return address is undefined: the outermost frame (_start, clone3)
	StopNoFDE       = 2 // no frame description covers the pc
	StopExpression  = 3 // a CFA expression other than a PLT stub's, or a CFA on another register
	StopRegister    = 4 // the return address or rbp has a rule other than "saved at CFA+N" or "unchanged"
	StopLargeOffset = 5 // an offset beyond what an entry holds
)

// StopNames names the stop reasons, by value.
var StopNames = []string{"none", "end of stack", "no frame description", "CFA expression", "register rule", "offset too large"}

// Rule says how to find the caller of a frame whose pc it covers.
type Rule struct {
	Base   uint8 // BaseRSP, BaseRBP, BasePLT or BaseNone
	Stop   uint8 // with BaseNone, or StopEnd: why the walk ends here
	Signal bool  // a signal frame (augmentation S): the caller's pc is not a return address
	// Offset is the CFA's offset from its base register.
	Offset int32
	// RBP is where the caller's rbp is saved, as an offset from the CFA
	// (negative); 0 when rbp is unchanged in this frame.
	RBP int32
	// RA is where the return address is, from the CFA: -8 on x86-64.
	RA int32
}

// Entry is a rule from PC on, to the next entry's PC. PC is an address as
// the ELF file gives it (a virtual address of its text).
type Entry struct {
	PC   uint64
	Rule Rule
}

// Table is a file's unwind table: entries sorted by PC, a BaseNone/
// StopNoFDE entry where a range without a frame description starts.
type Table struct {
	Entries []Entry
	// Source is the section the table came from.
	Source string
}

// Lookup returns the rule for pc, and false when no entry covers it.
func (t *Table) Lookup(pc uint64) (Rule, bool) {
	i, found := slices.BinarySearchFunc(t.Entries, pc, func(e Entry, pc uint64) int {
		switch {
		case e.PC < pc:
			return -1
		case e.PC > pc:
			return 1
		}
		return 0
	})
	if !found {
		if i == 0 {
			return Rule{}, false
		}
		i--
	}
	r := t.Entries[i].Rule
	if r.Base == BaseNone && r.Stop == StopNoFDE {
		return r, false
	}
	return r, true
}

func (r Rule) String() string {
	var s string
	switch r.Base {
	case BaseRSP:
		s = fmt.Sprintf("rsp+%d", r.Offset)
	case BaseRBP:
		s = fmt.Sprintf("rbp+%d", r.Offset)
	case BasePLT:
		s = "plt"
	case BaseSignal:
		return fmt.Sprintf("signal frame: rip at rsp+%d, rsp at rsp+%d, rbp at rsp+%d", r.RA, r.Offset, r.RBP)
	default:
		return "stop: " + StopNames[r.Stop]
	}
	if r.RBP != 0 {
		s += fmt.Sprintf(" rbp=c%d", r.RBP)
	}
	switch {
	case r.Stop == StopEnd:
		s += " ra=undefined"
	default:
		s += fmt.Sprintf(" ra=c%d", r.RA)
	}
	if r.Signal {
		s += " signal"
	}
	return s
}

// add appends a rule from pc on, merging it with the last when they are
// the same, and replacing the last when it starts at the same pc.
func (t *Table) add(pc uint64, r Rule) {
	if n := len(t.Entries); n > 0 {
		last := &t.Entries[n-1]
		if last.Rule == r {
			return
		}
		if last.PC == pc {
			last.Rule = r
			if n > 1 && t.Entries[n-2].Rule == r {
				t.Entries = t.Entries[:n-1]
			}
			return
		}
	}
	t.Entries = append(t.Entries, Entry{PC: pc, Rule: r})
}
