// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* What the unwinder's test programs report (unwind_report.c). */
#ifndef UNWIND_REPORT_H
#define UNWIND_REPORT_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * unwind_batched reports whether the program runs under the shim built
 * with the probes' model (MDSHIM_BATCH: allocations are batched with their
 * frames) rather than under libmdshim.so (front_guard: a corrupted block's
 * free logs its backtrace).
 */
int unwind_batched(void);

/* unwind_begin notes the shim's stop counts before the walks under test. */
void unwind_begin(void);

/*
 * unwind_end prints on stdout the reasons the walks since unwind_begin
 * stopped for ("stops end=1 ..."), and when batched, hands the thread's
 * batch over and logs the frames of its last allocation as the shim logs
 * a backtrace.
 */
void unwind_end(void);

#ifdef __cplusplus
}
#endif

#endif
