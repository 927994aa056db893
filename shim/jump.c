// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * longjmp, _longjmp, siglongjmp and __longjmp_chk: a program whose signal
 * handler leaves by a jump, the signal having come while the library ran
 * (a fault inside the shim's free of a bad pointer), would leave the
 * thread marked inside the library, its later calls passing through
 * unchecked, for the rest of its life. Each tells the library where the
 * jump goes (md_left_by_jump) and jumps with the C library's.
 *
 * glibc keeps the stack pointer of a jmp_buf mangled with the thread's
 * pointer guard (%fs:0x30 on x86-64): rotated left by 17 after a xor.
 */
#ifndef MD_STATIC_REAL
#define _GNU_SOURCE
#include <stdint.h>

#include "debug.h"
#include "real.h"

/* The slot of the stack pointer in glibc's x86-64 __jmp_buf. */
#define JB_RSP 6

void md_jump(uintptr_t *env) __attribute__((visibility("hidden"), used));

void md_jump(uintptr_t *env)
{
	uintptr_t guard, sp = env[JB_RSP];

	__asm__("mov %%fs:0x30, %0" : "=r"(guard));
	sp = ((sp >> 17) | (sp << 47)) ^ guard;
	md_left_by_jump(sp);
}

/*
 * Each entry saves its arguments, calls md_jump with the stack aligned and
 * jumps to the C library's function.
 */
#define ENTRY(name, real)                    \
	".globl " #name "\n"                  \
	".type " #name ", @function\n"        \
	".p2align 4\n" #name ":\n"            \
	"\tpush %rdi\n"                       \
	"\tpush %rsi\n"                       \
	"\tsub $8, %rsp\n"                    \
	"\tcall md_jump\n"                    \
	"\tadd $8, %rsp\n"                    \
	"\tpop %rsi\n"                        \
	"\tpop %rdi\n"                        \
	"\tjmp *" #real "(%rip)\n"            \
	".size " #name ", . - " #name "\n"

__asm__(".text\n" ENTRY(siglongjmp, md_real_siglongjmp) ENTRY(longjmp, md_real_siglongjmp)
		ENTRY(_longjmp, md_real_siglongjmp) ENTRY(__longjmp_chk, md_real_longjmp_chk)
	".globl md_siglongjmp_entry\n.hidden md_siglongjmp_entry\n.set md_siglongjmp_entry, siglongjmp\n"
	".globl md_longjmp_chk_entry\n.hidden md_longjmp_chk_entry\n.set md_longjmp_chk_entry, __longjmp_chk\n");
#endif
