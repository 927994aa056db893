// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The probe sites (site.c) and their state in a fork child (sitefork.c). */
#ifndef MD_SITE_H
#define MD_SITE_H

#include <stdbool.h>
#include <stdint.h>

#include "../abi/mdtrace_abi.h"

/*
 * The calls reported at the probe sites (site.c) are enum call's, in
 * abi/mdtrace_abi.h: CALL_MALLOC, CALL_CALLOC, CALL_REALLOC, CALL_MEMALIGN
 * and CALL_FREE.
 */

/*
 * md_site_probed reports whether mdtrace probes a site: a probe replaces
 * its first byte, the start of a 5-byte NOP (0f 1f 44 00 00). A site that
 * is not probed costs nothing to skip. md_sites_dead is set in a fork
 * child whose sites could not be made safe to call (md_sites_after_fork).
 */
extern int md_sites_dead __attribute__((visibility("hidden")));
void md_sites_after_fork(void);

static inline bool md_site_probed(const void *site)
{
	return *(const volatile uint8_t *)site != 0x0f && !md_sites_dead;
}

/*
 * mdshim_site_alloc follows every allocation the program makes, failed ones
 * too, with its result, the call, its arguments and, when mdtrace records
 * calls (MDSHIM_RECORD), the CLOCK_MONOTONIC time the call started (else 0).
 * While recording it also follows every free, as CALL_FREE, and a free's and
 * a realloc's present is the old block's PRESENT_BYTES plus one (0: none). realloc's
 * old block is reported to mdshim_site_free before the real realloc.
 *
 * mdshim_site_free precedes every free of a non-NULL pointer (call
 * CALL_FREE) and realloc of one (CALL_REALLOC), before the block can
 * be handed out again. While the hooks batch, a free that goes to the
 * site has an epoch of its own (md_batch_epoch), as a hand-over has:
 * the probes keep it aside, as a batch's, when the block's allocation is
 * still in another thread's batch; else epoch is 0.
 *
 * Sampling (MDSHIM_SAMPLE_BYTES), only the sampled blocks reach the sites:
 * a block's free or realloc calls mdshim_site_free only if the block was
 * reported. A realloc of a reported block whose new block is not sampled
 * calls mdshim_site_alloc only if it fails, with a NULL result, so that
 * the old block comes back; one of an unreported block whose new block is
 * sampled reports the new block as CALL_MALLOC.
 */
void mdshim_site_alloc(void *ret, unsigned long call, unsigned long a0, unsigned long a1, uint64_t start_ns,
		       uint64_t present) __attribute__((visibility("protected")));
void mdshim_site_free(void *ptr, unsigned long call, uint64_t epoch) __attribute__((visibility("protected")));

/* mdshim_site_batch takes a thread's batch of calls (batch.h). */
void mdshim_site_batch(struct md_batch *b, uint64_t used, uint64_t epoch, uint64_t flags)
	__attribute__((visibility("protected")));

#endif
