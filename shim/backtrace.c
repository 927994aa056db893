// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Backtraces, walked by the .eh_frame unwinder (unwind.c), and their log
 * lines, their functions named by md_symbolize (symbols.c). Nothing here
 * allocates, but for the thread's stack bounds, looked up once per thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>

#include "backtrace.h"
#include "debug.h"
#include "log.h"
#include "symbols.h"
#include "unwind.h"

/* Thread stack bounds, looked up once per thread. */
static __thread uintptr_t t_stack_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t t_stack_hi __attribute__((tls_model("initial-exec")));
static __thread int t_stack_known __attribute__((tls_model("initial-exec")));

static void stack_bounds(void)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;

	if (t_stack_known)
		return;
	t_stack_known = 1;
	/*
	 * pthread_getattr_np allocates and pthread_attr_destroy frees: the
	 * library's own calls, which go to the allocator unseen (asked from a
	 * batched call, they would be reported as the program's, and their
	 * free, within the batch's set-up, not).
	 */
	md_internal_begin();
	if (pthread_getattr_np(pthread_self(), &attr) == 0) {
		if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
			t_stack_lo = (uintptr_t)addr;
			t_stack_hi = (uintptr_t)addr + size;
		}
		pthread_attr_destroy(&attr);
	}
	md_internal_end();
}

bool md_stack_bounds(uintptr_t *lo, uintptr_t *hi)
{
	stack_bounds();
	*lo = t_stack_lo;
	*hi = t_stack_hi;
	return t_stack_hi != 0;
}

size_t md_backtrace(void *fp, uintptr_t *frames, size_t max)
{
	uintptr_t at = (uintptr_t)fp;
	stack_t ss;

	stack_bounds();
	if (t_stack_hi == 0)
		return 0;
	/* A signal handler on the thread's signal stack: its frames, then the interrupted code's. */
	if ((at < t_stack_lo || at >= t_stack_hi) && sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK) &&
	    at >= (uintptr_t)ss.ss_sp && at < (uintptr_t)ss.ss_sp + ss.ss_size)
		return md_unwind_alt(at, t_stack_lo, t_stack_hi, (uintptr_t)ss.ss_sp, (uintptr_t)ss.ss_sp + ss.ss_size,
				     frames, max, MD_UNWIND_PC | MD_UNWIND_NO_SELF, NULL);
	return md_unwind(at, t_stack_lo, t_stack_hi, frames, max, MD_UNWIND_PC | MD_UNWIND_NO_SELF, NULL);
}

void md_backtrace_log(const uintptr_t *frames, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uintptr_t pc = frames[i];
		struct md_sym sym;

		if (md_symbolize(pc, &sym)) {
			const char *name = sym.path[0] != '\0' ? sym.path : "<unknown>";

			if (sym.named)
				md_log('E', "          #%02zd  pc %016lx  %s (%s+%lu)", (ssize_t)i,
				       (unsigned long)sym.rel_pc, name, sym.name,
				       (unsigned long)sym.offset);
			else
				md_log('E', "          #%02zd  pc %016lx  %s", (ssize_t)i,
				       (unsigned long)sym.rel_pc, name);
		} else {
			md_log('E', "          #%02zd  pc %016lx  <unknown>", (ssize_t)i,
			       (unsigned long)pc);
		}
	}
}

void md_backtrace_log_or_failure(const uintptr_t *frames, size_t n)
{
	if (n == 0)
		md_log('E', "  Backtrace failed to get any frames.");
	else
		md_backtrace_log(frames, n);
}
