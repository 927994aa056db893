package unwind

import (
	"bytes"
	"fmt"
)

// A register's rule while a CFA program runs.
type regRule struct {
	kind   uint8 // ruleSame, ruleUndefined, ruleOffset, ruleOther
	offset int64
}

const (
	ruleSame = iota
	ruleUndefined
	ruleOffset
	ruleOther
	// ruleAtRSP: saved at rsp+offset (DW_CFA_expression DW_OP_breg7),
	// as a signal frame's registers are, in the ucontext.
	ruleAtRSP
)

// cfaRule is the CFA's rule while a program runs.
type cfaRule struct {
	reg    uint64
	offset int64
	// expr is a CFA expression's bytes, nil for register + offset.
	expr []byte
}

// state is a row of the table a CFA program builds, for the registers
// the walk needs.
type state struct {
	cfa cfaRule
	rbp regRule
	ra  regRule
	rsp regRule
}

// pltExpr is the CFA expression of a PLT stub (binutils, lld): rsp + 8,
// plus 8 from the stub's eleventh (or tenth) byte on, after its push:
// DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11;
// DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus.
var pltExpr = []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}

// sigCFA is a signal frame's CFA expression (glibc's __restore_rt): the
// interrupted rsp, read at rsp+N: DW_OP_breg7 N; DW_OP_deref.
func sigCFA(expr []byte) bool {
	return len(expr) >= 3 && expr[0] == 0x77 && expr[len(expr)-1] == 0x06
}

// rule turns a row into the rule the walk follows.
func (s *state) rule(signal bool) Rule {
	r := Rule{Signal: signal, RA: -8}
	if signal && sigCFA(s.cfa.expr) && s.ra.kind == ruleAtRSP && s.rsp.kind == ruleAtRSP && s.rbp.kind == ruleAtRSP {
		// The interrupted registers, in the ucontext at rsp.
		return Rule{Base: BaseSignal, Signal: true, RA: int32(s.ra.offset), Offset: int32(s.rsp.offset), RBP: int32(s.rbp.offset)}
	}
	switch {
	case s.cfa.expr != nil:
		if len(s.cfa.expr) == len(pltExpr) && bytes.Equal(s.cfa.expr[:6], pltExpr[:6]) &&
			(s.cfa.expr[6] == 0x3b || s.cfa.expr[6] == 0x3a) && bytes.Equal(s.cfa.expr[7:], pltExpr[7:]) {
			// The threshold, 11 or 10, in the offset.
			return Rule{Base: BasePLT, Offset: int32(s.cfa.expr[6] - 0x30), RA: -8, Signal: signal}
		}
		return Rule{Base: BaseNone, Stop: StopExpression}
	case s.cfa.reg == regRSP:
		r.Base = BaseRSP
	case s.cfa.reg == regRBP:
		r.Base = BaseRBP
	default:
		return Rule{Base: BaseNone, Stop: StopExpression}
	}
	if s.cfa.offset < -1<<31 || s.cfa.offset >= 1<<31 {
		return Rule{Base: BaseNone, Stop: StopLargeOffset}
	}
	r.Offset = int32(s.cfa.offset)
	switch s.ra.kind {
	case ruleOffset:
		r.RA = int32(s.ra.offset)
	case ruleUndefined:
		r.Stop = StopEnd
	default:
		return Rule{Base: BaseNone, Stop: StopRegister}
	}
	switch s.rbp.kind {
	case ruleOffset:
		if s.rbp.offset == 0 || s.rbp.offset < -1<<31 || s.rbp.offset >= 1<<31 {
			return Rule{Base: BaseNone, Stop: StopLargeOffset}
		}
		r.RBP = int32(s.rbp.offset)
	case ruleSame, ruleUndefined:
	default:
		return Rule{Base: BaseNone, Stop: StopRegister}
	}
	return r
}

// DWARF call frame instructions (DW_CFA_*).
const (
	cfaAdvanceLoc        = 0x40
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtSF = 0x2f
)

// run executes the CIE's initial instructions, then an FDE's, from pc
// begin, and returns the rows: a rule from each location on.
func run(c *cie, fdeProgram []byte, begin, end uint64) ([]Entry, error) {
	var init state
	init.ra = regRule{kind: ruleUndefined}
	if err := execute(c, c.initial, &init, nil, nil, begin, end); err != nil {
		return nil, fmt.Errorf("CIE program: %w", err)
	}
	cur := init
	var rows []Entry
	if err := execute(c, fdeProgram, &cur, &init, &rows, begin, end); err != nil {
		return nil, err
	}
	return rows, nil
}

// execute runs a program on s; with rows, it appends a row at each
// location change and at the end (init is the CIE's row, for restores).
func execute(c *cie, prog []byte, s *state, init *state, rows *[]Entry, loc, end uint64) error {
	r := reader{b: prog}
	var stack []state
	emit := func() {
		if rows == nil || loc >= end {
			return
		}
		rule := s.rule(c.signal)
		if n := len(*rows); n > 0 && (*rows)[n-1].PC == loc {
			(*rows)[n-1].Rule = rule
			return
		}
		*rows = append(*rows, Entry{PC: loc, Rule: rule})
	}
	advance := func(delta uint64) {
		emit()
		loc += delta * c.codeAlign
	}
	setReg := func(reg uint64, rr regRule) {
		switch reg {
		case regRBP:
			s.rbp = rr
		case regRA:
			s.ra = rr
		case regRSP:
			s.rsp = rr
		}
	}
	restoreReg := func(reg uint64) {
		if init == nil {
			setReg(reg, regRule{})
			return
		}
		switch reg {
		case regRBP:
			s.rbp = init.rbp
		case regRA:
			s.ra = init.ra
		case regRSP:
			s.rsp = init.rsp
		}
	}
	for r.off < uint64(len(r.b)) && r.err == nil && loc < end {
		op := r.u8()
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			advance(uint64(op & 0x3f))
			continue
		case cfaOffset:
			setReg(uint64(op&0x3f), regRule{kind: ruleOffset, offset: int64(r.uleb()) * c.dataAlign})
			continue
		case cfaRestore:
			restoreReg(uint64(op & 0x3f))
			continue
		}
		switch op {
		case cfaNop:
		case cfaSetLoc:
			emit()
			loc = r.pointer(c.ptrEnc, 0)
		case cfaAdvanceLoc1:
			advance(uint64(r.u8()))
		case cfaAdvanceLoc2:
			advance(uint64(r.u16()))
		case cfaAdvanceLoc4:
			advance(uint64(r.u32()))
		case cfaOffsetExtended:
			reg := r.uleb()
			setReg(reg, regRule{kind: ruleOffset, offset: int64(r.uleb()) * c.dataAlign})
		case cfaOffsetExtendedSF:
			reg := r.uleb()
			setReg(reg, regRule{kind: ruleOffset, offset: r.sleb() * c.dataAlign})
		case cfaGNUNegOffsetExtSF:
			reg := r.uleb()
			setReg(reg, regRule{kind: ruleOffset, offset: -int64(r.uleb()) * c.dataAlign})
		case cfaRestoreExtended:
			restoreReg(r.uleb())
		case cfaUndefined:
			setReg(r.uleb(), regRule{kind: ruleUndefined})
		case cfaSameValue:
			setReg(r.uleb(), regRule{kind: ruleSame})
		case cfaRegister:
			reg := r.uleb()
			r.uleb()
			setReg(reg, regRule{kind: ruleOther})
		case cfaRememberState:
			stack = append(stack, *s)
		case cfaRestoreState:
			if len(stack) == 0 {
				return fmt.Errorf("DW_CFA_restore_state with nothing remembered")
			}
			*s = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		case cfaDefCFA:
			s.cfa = cfaRule{reg: r.uleb(), offset: int64(r.uleb())}
		case cfaDefCFASF:
			reg := r.uleb()
			s.cfa = cfaRule{reg: reg, offset: r.sleb() * c.dataAlign}
		case cfaDefCFARegister:
			s.cfa.reg = r.uleb()
			s.cfa.expr = nil
		case cfaDefCFAOffset:
			s.cfa.offset = int64(r.uleb())
		case cfaDefCFAOffsetSF:
			s.cfa.offset = r.sleb() * c.dataAlign
		case cfaDefCFAExpression:
			n := r.uleb()
			if r.need(n) {
				s.cfa.expr = r.b[r.off : r.off+n]
				r.off += n
			}
		case cfaExpression:
			reg := r.uleb()
			n := r.uleb()
			rr := regRule{kind: ruleOther}
			if e := (reader{b: r.b, off: r.off}); n >= 2 && e.u8() == 0x77 {
				// DW_OP_breg7 N alone: saved at rsp+N.
				if off := e.sleb(); e.err == nil && e.off == r.off+n {
					rr = regRule{kind: ruleAtRSP, offset: off}
				}
			}
			r.off += n
			setReg(reg, rr)
		case cfaValExpression:
			reg := r.uleb()
			n := r.uleb()
			r.off += n
			setReg(reg, regRule{kind: ruleOther})
		case cfaValOffset:
			reg := r.uleb()
			r.uleb()
			setReg(reg, regRule{kind: ruleOther})
		case cfaValOffsetSF:
			reg := r.uleb()
			r.sleb()
			setReg(reg, regRule{kind: ruleOther})
		case cfaGNUArgsSize:
			r.uleb()
		default:
			return fmt.Errorf("call frame instruction %#x", op)
		}
	}
	if r.err != nil {
		return r.err
	}
	emit()
	return nil
}
