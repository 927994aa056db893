// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The rules cfi.c gives at pcs whose frames are known, in a program built
 * without PIE, so that a library function's address is its PLT entry:
 *
 *  - a PLT entry: CFA = rsp + 8 at its jump, rsp + 16 once it has pushed
 *    its index (the PLT's CFA expression, evaluated at the pc);
 *  - glibc's sigreturn trampoline, sigaction's sa_restorer: a signal frame;
 *  - _start: the end of the stack (its return address is undefined);
 *  - a function after its prologue, push %rbp; mov %rsp, %rbp (below):
 *    CFA = rbp + 16, rbp saved at CFA - 16, the return address at CFA - 8;
 *  - a heap address: in no object.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cfi.h"
#include "check.h"

extern char _start[];

/* framed: a frame-pointer prologue, then a call; framed_call is the return address. */
void framed(void);
extern char framed_call[];
__asm__(".text\n"
	".globl framed\n"
	".type framed, @function\n"
	"framed:\n"
	"	.cfi_startproc\n"
	"	push %rbp\n"
	"	.cfi_def_cfa_offset 16\n"
	"	.cfi_offset %rbp, -16\n"
	"	mov %rsp, %rbp\n"
	"	.cfi_def_cfa_register %rbp\n"
	"	call abort\n"
	".globl framed_call\n"
	"framed_call:\n"
	"	pop %rbp\n"
	"	.cfi_def_cfa %rsp, 8\n"
	"	ret\n"
	"	.cfi_endproc\n"
	".size framed, . - framed\n");

static void nothing(int sig)
{
	(void)sig;
}

static void check_cfa(const char *what, uintptr_t pc, int bp_based, int32_t off)
{
	union md_rule r = md_cfi_rule(pc);

	CHECK(r.kind == MD_RULE_CFA && r.cfa_bp == bp_based && r.cfa_off == off && r.ra_off == -8 && !r.deref,
	      "%s: rule kind %d, CFA %s + %d, return address at CFA %d; want CFA %s + %d", what, r.kind,
	      r.cfa_bp ? "rbp" : "rsp", r.cfa_off, r.ra_off, bp_based ? "rbp" : "rsp", off);
}

int main(void)
{
	uintptr_t plt = (uintptr_t)(void *)puts, pc = (uintptr_t)framed_call - 1;
	struct sigaction sa, old;
	union md_rule r;
	void *heap = malloc(64);

	/* The PLT entry: jmp *GOT (6 bytes), push $index (5), jmp to the PLT's start. */
	check_cfa("puts@plt", plt, 0, 8);
	check_cfa("puts@plt after its push", plt + 11, 0, 16);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = nothing;
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR1, NULL, &old);
	r = md_cfi_rule((uintptr_t)(void *)old.sa_restorer - 1);
	CHECK(r.kind == MD_RULE_SIGNAL, "sa_restorer %p: rule kind %d, want the trampoline's", (void *)old.sa_restorer,
	      r.kind);

	r = md_cfi_rule((uintptr_t)_start + 1);
	CHECK(r.kind == MD_RULE_END, "_start: rule kind %d, want the end of the stack", r.kind);

	check_cfa("framed at its call", pc, 1, 16);
	r = md_cfi_rule(pc);
	CHECK(r.bp_saved && r.bp_off == -16, "framed: rbp %s at CFA %d, want saved at CFA - 16",
	      r.bp_saved ? "saved" : "not saved", r.bp_off);

	r = md_cfi_rule((uintptr_t)heap);
	CHECK(r.kind == MD_RULE_BAD_RA, "a heap address: rule kind %d, want none", r.kind);
	free(heap);
	if (failures == 0)
		printf("ok\n");
	return failures != 0;
}
