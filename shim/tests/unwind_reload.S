/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * lib_entry for the reload case (run_unwind.sh), built twice: with
 * WITH_RBP it keeps a frame pointer (CFA = rbp + 16), without it only
 * moves rsp (CFA = rsp + 32). Its call of lib_leaf returns to the same
 * offset in both, so a cache of rules keyed by the return address that
 * outlived the first library's dlclose would walk the second by the
 * first's rule.
 */
	.text
	.balign 64
	.globl lib_entry
	.type lib_entry, @function
lib_entry:
	.cfi_startproc
#ifdef WITH_RBP
	push %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	mov %rsp, %rbp
	.cfi_def_cfa_register %rbp
	sub $16, %rsp
	add $1, %edi
	call lib_leaf@PLT
	leave
	.cfi_def_cfa %rsp, 8
	ret
#else
	sub $24, %rsp
	.cfi_def_cfa_offset 32
	.byte 0x0f, 0x1f, 0x40, 0x00 /* a 4-byte nop: the call ends where the other's does */
	add $1, %edi
	call lib_leaf@PLT
	add $24, %rsp
	.cfi_def_cfa_offset 8
	ret
#endif
	.cfi_endproc
	.size lib_entry, . - lib_entry
	.balign 64
	.section .note.GNU-stack, "", @progbits
