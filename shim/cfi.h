// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The rule of a frame at a pc, from .eh_frame (cfi.c), for the unwinder (unwind.c). */
#ifndef MD_CFI_H
#define MD_CFI_H

#include <stdint.h>

enum md_rule_kind {
	MD_RULE_NONE,        /* an empty cache slot */
	MD_RULE_CFA,         /* CFA = base + cfa_off, or the word there (deref) */
	MD_RULE_END,         /* the return address is undefined: the outermost frame */
	MD_RULE_SIGNAL,      /* the sigreturn trampoline: the interrupted registers are in the ucontext */
	MD_RULE_NO_FDE,      /* code in an object without an FDE: one frame-pointer step */
	MD_RULE_UNSUPPORTED, /* a rule not expressed here */
	MD_RULE_BAD_RA,      /* in no object: never cached, as an object may be loaded there later */
};

/* A frame's rule, in a word, so that a cache slot is two words. */
union md_rule {
	uint64_t word;
	struct {
		int32_t cfa_off;
		int16_t bp_off; /* with bp_saved: rbp is saved at CFA + bp_off */
		int8_t ra_off;  /* the return address is at CFA + ra_off */
		uint8_t kind : 3;
		uint8_t cfa_bp : 1;   /* the CFA's base is rbp, else rsp */
		uint8_t deref : 1;    /* the CFA is the word at base + cfa_off */
		uint8_t bp_saved : 1; /* rbp is saved in the frame */
		uint8_t bp_lost : 1;  /* the caller's rbp is not known */
	};
};
_Static_assert(sizeof(union md_rule) == 8, "a rule is a word");

/*
 * md_cfi_rule gives the rule of the frame at pc (a return address minus
 * one, or where a signal stopped): in no loaded object, MD_RULE_BAD_RA;
 * glibc's sigreturn trampoline (mov $15, %rax; syscall) at pc + 1,
 * MD_RULE_SIGNAL; else what the object's FDE says at pc. Async-signal-safe.
 */
union md_rule md_cfi_rule(uintptr_t pc) __attribute__((visibility("hidden")));

#endif
