//go:build linux

package tracer

import (
	"encoding/binary"
	"os"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"github.com/mdtrace/mdtrace/stacks"
)

// A thread of a process whose allocator calls trap into probes is, most of
// the times it is stopped, just past a trap: inside the C library, at the
// start of one of its allocator functions. The injection's thread must not
// be inside the C library, where it may hold a lock the loader takes (a
// malloc arena's, stdio's); but at the start of malloc, before anything
// that takes a lock, and called from outside the C library and the loader,
// it holds none of theirs, and can call dlopen. Without this, a thread of
// sqlite3 trapping at 6 µs a call was stopped inside the C library at
// almost every try, each half a millisecond apart: its injection waited 8
// to 136 ms.

// allocEntry is one of the C library's allocator functions: its start in
// the process, and its first prologueMax bytes as the file has them (the
// process's code has the probes' breakpoints).
type allocEntry struct {
	addr uint64
	code []byte
}

// prologueMax is how far into an allocator function a stop counts as at
// its start.
const prologueMax = 48

// atAllocatorEntry reports whether a thread of process pid stopped with
// regs is at the start of one of the C library's allocator functions
// (prologueDepth), called from code outside the C library and the loader.
// A call whose return probe fired returns to the kernel's trampoline
// ([uprobes], mapped at the first), which hides its caller: not that one.
func (pf *processFiles) atAllocatorEntry(pid, tid int, regs *unix.PtraceRegs) bool {
	caller, ok := pf.entryCaller(tid, regs)
	if !ok || inMappings(pf.libc, caller) || inMappings(pf.loader, caller) {
		return false
	}
	maps, err := stacks.ReadMaps(pid)
	if err != nil {
		return false
	}
	m := maps.Find(caller)
	return m != nil && m.Perms[2] == 'x' && m.Path != "[uprobes]"
}

// entryCaller returns, for a thread stopped with regs at the start of one
// of the C library's allocator functions, the address its call returns
// to; false where it is not at such a start.
func (pf *processFiles) entryCaller(tid int, regs *unix.PtraceRegs) (uint64, bool) {
	if !inMappings(pf.libc, regs.Rip) {
		return 0, false
	}
	pf.readEntries()
	for _, e := range pf.entries {
		if regs.Rip < e.addr || regs.Rip-e.addr >= prologueMax {
			continue
		}
		depth, ok := prologueDepth(e.code[:regs.Rip-e.addr])
		if !ok {
			return 0, false
		}
		var ret [8]byte
		if n, err := unix.PtracePeekData(tid, uintptr(regs.Rsp)+uintptr(depth), ret[:]); err != nil || n != len(ret) {
			return 0, false
		}
		return binary.LittleEndian.Uint64(ret[:]), true
	}
	return 0, false
}

// readEntries finds, once, where the C library's allocator functions are
// in the process.
func (pf *processFiles) readEntries() {
	if pf.entriesRead {
		return
	}
	pf.entriesRead = true
	offsets, err := funcOffsets(pf.libcFile.Path)
	if err != nil {
		return
	}
	f, err := os.Open(pf.libcFile.Path)
	if err != nil {
		return
	}
	defer f.Close()
	var text []stacks.Mapping
	for _, m := range pf.libc {
		if m.Perms[2] == 'x' {
			text = append(text, m)
		}
	}
	for _, ep := range entryPoints {
		fs, ok := offsets[ep.symbol]
		if !ok {
			continue
		}
		addr, ok := addressOf(text, fs.off)
		code := make([]byte, prologueMax)
		if ok && readFull(f, code, fs.off) {
			pf.entries = append(pf.entries, allocEntry{addr: addr, code: code})
		}
	}
}

// prologueDepth walks code, a function's first instructions up to a pc,
// and returns how far below the entry's the stack pointer is at the pc
// (its pushes and "sub $n,%rsp"), and whether those instructions are all
// of a prologue: no call, no jump away, no atomic access (a lock), and the
// stack pointer moved only by pushes and subtractions. A conditional jump
// not taken (the pc follows it) is one.
func prologueDepth(code []byte) (int, bool) {
	depth := 0
	for pc := 0; pc < len(code); {
		inst, err := decode(code[pc:])
		if err != nil || pc+inst.Len > len(code) {
			return 0, false
		}
		pc += inst.Len
		for _, p := range inst.Prefix {
			if p&0xff == x86asm.PrefixLOCK {
				return 0, false
			}
		}
		switch inst.Op {
		case x86asm.CALL, x86asm.JMP, x86asm.RET, x86asm.LCALL, x86asm.LJMP, x86asm.LRET,
			x86asm.XCHG, x86asm.CMPXCHG, x86asm.CMPXCHG8B, x86asm.CMPXCHG16B, x86asm.XADD,
			x86asm.SYSCALL, x86asm.INT, x86asm.POP, x86asm.LEAVE, x86asm.ENTER:
			return 0, false
		case x86asm.PUSH:
			if _, ok := inst.Args[0].(x86asm.Reg); !ok {
				return 0, false
			}
			depth += 8
			continue
		}
		if n := stackSub(inst); n > 0 {
			depth += n
			continue
		}
		// Any other write of the stack pointer.
		if r, ok := inst.Args[0].(x86asm.Reg); ok && (r == x86asm.RSP || r == x86asm.ESP || r == x86asm.SP) {
			return 0, false
		}
	}
	return depth, true
}
