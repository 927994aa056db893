// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * An x86-64 unwinder from .eh_frame, for backtraces through code built
 * without frame pointers (Debian's and RHEL's packages, every default -O2
 * build). It runs inside malloc: it allocates nothing, takes no lock, and
 * is safe in a signal handler and under concurrent threads.
 *
 * A return address is looked up in a direct-mapped cache of rules, one
 * word a pc; a miss asks cfi.c for the rule from the object's .eh_frame.
 * Each frame then gives its caller's: CFA = rsp or rbp plus an offset,
 * the return address at CFA - 8, rbp restored if it was saved, rsp = CFA;
 * at the sigreturn trampoline the registers the signal stopped come from
 * the ucontext; code without an FDE takes one frame-pointer step if rbp
 * holds a record on the stack. Every stop is counted by its reason.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ucontext.h>

#include "cfi.h"
#include "unwind.h"

/* This library's image, provided by the linker. */
extern const char __ehdr_start[] __attribute__((visibility("hidden")));
extern const char _end[] __attribute__((visibility("hidden")));

/* ---- the cache of rules ---- */

/*
 * The cache: a slot per hash of a pc, holding the rule and a check word,
 * the pc's hash xor the rule. Slots are written and read a word at a time
 * with no lock; a read that mixes two writes (two threads, or a signal
 * handler, filling a slot at once) fails the check, but for odds of 2^-51.
 */
#define CACHE_BITS 13
#define HASH_MUL 0x9e3779b97f4a7c15ULL

struct slot {
	uint64_t check, rule;
};
static struct slot cache[1 << CACHE_BITS];

static inline union md_rule lookup(uintptr_t pc)
{
	uint64_t h = (uint64_t)pc * HASH_MUL;
	struct slot *s = &cache[h >> (64 - CACHE_BITS)];
	union md_rule r;

	r.word = __atomic_load_n(&s->rule, __ATOMIC_RELAXED);
	if (__builtin_expect((__atomic_load_n(&s->check, __ATOMIC_RELAXED) ^ r.word) == h && r.kind != MD_RULE_NONE, 1))
		return r;
	r = md_cfi_rule(pc);
	if (r.kind != MD_RULE_BAD_RA) {
		__atomic_store_n(&s->rule, r.word, __ATOMIC_RELAXED);
		__atomic_store_n(&s->check, h ^ r.word, __ATOMIC_RELAXED);
	}
	return r;
}

/* ---- the walk ---- */

/* Stop counts, in stripes that threads pick by the address of their TLS, so that they seldom share a line. */
#define STRIPES 16
static struct {
	uint64_t n[MD_UNWIND_STOPS];
} __attribute__((aligned(64))) g_stops[STRIPES];
static __thread char t_stripe __attribute__((tls_model("initial-exec")));

static size_t stop(enum md_unwind_stop why, size_t n)
{
	unsigned s = (unsigned)(((uintptr_t)&t_stripe * HASH_MUL) >> 60);

	__atomic_fetch_add(&g_stops[s].n[why], 1, __ATOMIC_RELAXED);
	return n;
}

void md_unwind_stops(uint64_t counts[MD_UNWIND_STOPS])
{
	for (int i = 0; i < MD_UNWIND_STOPS; i++) {
		counts[i] = 0;
		for (int s = 0; s < STRIPES; s++)
			counts[i] += __atomic_load_n(&g_stops[s].n[i], __ATOMIC_RELAXED);
	}
}

/* The walk's registers: a frame's return address (or interrupted pc + 1), rsp and rbp. */
struct regs {
	uintptr_t ra, sp, bp;
	bool bp_lost; /* rbp's value is not known */
	bool exact;   /* ra - 1 is where the frame stopped, not a call: a signal came there */
};

/* load reads the word at addr if it lies in the stack [lo, hi). */
static inline bool load(uintptr_t addr, uintptr_t lo, uintptr_t hi, uintptr_t *v)
{
	if (addr < lo || addr > hi - sizeof(uintptr_t) || (addr & 7) != 0)
		return false;
	*v = *(const uintptr_t *)addr;
	return true;
}

/* fp_step steps over a frame record at rbp, on the stack above rsp. */
static bool fp_step(struct regs *r, uintptr_t lo, uintptr_t hi)
{
	uintptr_t bp = r->bp;

	if (r->bp_lost || bp < r->sp || bp < lo || bp > hi - 16 || (bp & 7) != 0)
		return false;
	r->bp = ((const uintptr_t *)bp)[0];
	r->ra = ((const uintptr_t *)bp)[1];
	r->sp = bp + 16;
	return true;
}

/*
 * step moves r from a frame to its caller by rule; it returns the reason
 * to stop, or MD_UNWIND_STOPS to go on.
 */
static enum md_unwind_stop step(struct regs *r, union md_rule rule, uintptr_t lo, uintptr_t hi)
{
	uintptr_t cfa, ra, bp;

	switch (rule.kind) {
	case MD_RULE_CFA:
		if (rule.cfa_bp && r->bp_lost)
			return MD_UNWIND_UNSUPPORTED;
		cfa = (rule.cfa_bp ? r->bp : r->sp) + (intptr_t)rule.cfa_off;
		if (rule.deref && !load(cfa, lo, hi, &cfa))
			return MD_UNWIND_STACK_BOUNDS;
		if (cfa <= r->sp || !load(cfa + (intptr_t)rule.ra_off, lo, hi, &ra))
			return MD_UNWIND_STACK_BOUNDS;
		if (rule.bp_saved) {
			if (!load(cfa + (intptr_t)rule.bp_off, lo, hi, &bp))
				return MD_UNWIND_STACK_BOUNDS;
			r->bp = bp;
			r->bp_lost = false;
		} else if (rule.bp_lost) {
			r->bp_lost = true;
		}
		r->ra = ra;
		r->sp = cfa;
		r->exact = false;
		return MD_UNWIND_STOPS;
	case MD_RULE_SIGNAL: {
		/* rsp points at the ucontext the kernel pushed under the handler's frame. */
		uintptr_t uc = r->sp, rip, sp;
		size_t gregs = offsetof(ucontext_t, uc_mcontext.gregs);

		if (!load(uc + gregs + REG_RIP * 8, lo, hi, &rip) || !load(uc + gregs + REG_RSP * 8, lo, hi, &sp) ||
		    !load(uc + gregs + REG_RBP * 8, lo, hi, &bp))
			return MD_UNWIND_STACK_BOUNDS;
		if (sp <= r->sp)
			return MD_UNWIND_STACK_BOUNDS;
		r->ra = rip + 1;
		r->sp = sp;
		r->bp = bp;
		r->bp_lost = false;
		r->exact = true;
		return MD_UNWIND_STOPS;
	}
	case MD_RULE_NO_FDE:
		/* Where a signal stopped code without an FDE, a PLT stub's: the return address on top. */
		if (r->exact && load(r->sp, lo, hi, &ra) && lookup(ra - 1).kind != MD_RULE_BAD_RA) {
			r->ra = ra;
			r->sp += 8;
			r->exact = false;
			return MD_UNWIND_STOPS;
		}
		if (!fp_step(r, lo, hi))
			return MD_UNWIND_NO_FDE;
		r->exact = false;
		return MD_UNWIND_STOPS;
	case MD_RULE_END:
		return MD_UNWIND_END;
	default:
		return MD_UNWIND_UNSUPPORTED;
	}
}

static inline bool in_self(uintptr_t pc)
{
	return pc >= (uintptr_t)__ehdr_start && pc < (uintptr_t)_end;
}

size_t md_unwind(uintptr_t fp, uintptr_t lo, uintptr_t hi, uintptr_t *out, size_t max, unsigned flags)
{
	struct regs r = {0};
	size_t n = 0;

	if (fp < lo || fp > hi - 16 || (fp & 7) != 0)
		return stop(MD_UNWIND_STACK_BOUNDS, 0);
	r.bp = ((const uintptr_t *)fp)[0];
	r.ra = ((const uintptr_t *)fp)[1];
	r.sp = fp + 16;
	for (;;) {
		uintptr_t pc = r.ra - 1;
		bool keep = !(flags & MD_UNWIND_NO_SELF) || !in_self(pc);
		union md_rule rule;
		enum md_unwind_stop why;

		if (keep && n == max)
			return stop(MD_UNWIND_FRAME_LIMIT, n);
		if (r.ra < 4096 || r.ra >= (1ULL << 47))
			return stop(MD_UNWIND_BAD_RA, n);
		rule = lookup(pc);
		if (rule.kind == MD_RULE_BAD_RA)
			return stop(MD_UNWIND_BAD_RA, n);
		/* The trampoline's frame and an interrupted one are where they stopped: pc + 1. */
		if (keep)
			out[n++] = (flags & MD_UNWIND_PC ? pc : r.ra) + (r.exact || rule.kind == MD_RULE_SIGNAL);
		why = step(&r, rule, lo, hi);
		if (why != MD_UNWIND_STOPS)
			return stop(why, n);
	}
}
