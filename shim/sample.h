// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Sampling of the allocations reported at the probe sites (sample.c). */
#ifndef MD_SAMPLE_H
#define MD_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Sampling (sample.c). md_sample_bytes is the mean interval, in bytes,
 * between the allocations reported at the probe sites, 0 when every one is
 * (MDSHIM_SAMPLE_BYTES unset); md_sample_init reads it, md_sample_start
 * turns sampling on with a mean interval of n bytes (false if it cannot:
 * a shim loaded into a running process gets n from mdtrace).
 * md_sample_alloc decides whether an allocation of size bytes is sampled;
 * md_sample_mark notes a sampled block (false if there was no memory for
 * it: the block must then not be reported), and md_sample_take reports
 * whether a block is a sampled one, forgetting it. Use them only with
 * md_sample_bytes set.
 */
extern uint64_t md_sample_bytes __attribute__((visibility("hidden")));
void md_sample_init(void);
bool md_sample_start(uint64_t n);
bool md_sample_alloc(size_t size);
bool md_sample_mark(const void *p);
bool md_sample_take(const void *p);

#endif
