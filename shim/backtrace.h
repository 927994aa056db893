// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Backtraces and their log lines (backtrace.c). */
#ifndef MD_BACKTRACE_H
#define MD_BACKTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * md_backtrace walks the stack from fp (the frame of an exported hook) by
 * the callers' unwind tables (md_unwind, unwind.h) and stores up to max
 * return addresses minus one, skipping the library's own code. Each read
 * of the stack is checked against the thread's stack bounds.
 */
size_t md_backtrace(void *fp, uintptr_t *frames, size_t max);

/*
 * md_stack_bounds gives the thread's stack, [lo, hi), looked up once per
 * thread (pthread_getattr_np, which allocates: call it as an internal
 * call); false if it is not known.
 */
bool md_stack_bounds(uintptr_t *lo, uintptr_t *hi);

/* md_backtrace_log logs frames in Android's backtrace format. */
void md_backtrace_log(const uintptr_t *frames, size_t n);

/* md_backtrace_log_or_failure is md_backtrace_log, or Android's line for no frames. */
void md_backtrace_log_or_failure(const uintptr_t *frames, size_t n) __attribute__((visibility("hidden")));

#endif
