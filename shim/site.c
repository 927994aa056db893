// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Probe sites: the functions mdtrace puts its uprobes on when the shim is
 * loaded, instead of probing the allocator's entry and return: one after
 * allocations, one before frees, and one taking a batch of both (batch.c).
 *
 * Each starts with a 5-byte NOP (0f 1f 44 00 00), the one instruction the
 * kernel can replace with a call into its uprobe trampoline rather than a
 * breakpoint trap, and then returns. Without a probe a call costs a few
 * cycles. They are written in assembly so that nothing, not even an endbr64
 * or a frame setup, comes before the NOP, and they are protected symbols so
 * that the hooks call them directly while mdtrace finds them in .dynsym.
 *
 * The hooks in mdshim.c call them with their own frame pointer in %rbp, so
 * the frame chain a probe walks starts at the program's call of malloc.
 */
#include "site.h"

#define SITE(name)                                          \
	".globl " #name "\n"                                \
	".protected " #name "\n"                            \
	".type " #name ", @function\n"                      \
	".p2align 4\n" #name ":\n"                          \
	"\t.byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"            \
	"\tret\n"                                           \
	".size " #name ", . - " #name "\n"

__asm__(".text\n" SITE(mdshim_site_alloc) SITE(mdshim_site_free) SITE(mdshim_site_batch));

