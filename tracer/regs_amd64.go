//go:build linux && amd64

package tracer

import "golang.org/x/sys/unix"

// threadState reads the registers of stopped thread tid.
func threadState(tid int) (ThreadState, error) {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &r); err != nil {
		return ThreadState{}, err
	}
	return ThreadState{TID: tid, SP: r.Rsp, Regs: []uint64{
		r.R15, r.R14, r.R13, r.R12, r.Rbp, r.Rbx, r.R11, r.R10, r.R9, r.R8,
		r.Rax, r.Rcx, r.Rdx, r.Rsi, r.Rdi, r.Orig_rax, r.Rip, r.Rsp, r.Fs_base, r.Gs_base,
	}}, nil
}
