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
bool md_sample_mark(const void *p);

/*
 * The fast paths of md_sample_alloc and md_sample_take, inline in the
 * hooks, as every call takes one of them: the countdown of a thread's
 * bytes to its next sample (0 before its first interval is drawn), and
 * the filter in front of the sampled blocks (sample.c).
 */
extern __thread int64_t md_sample_left __attribute__((tls_model("initial-exec"), visibility("hidden")));
extern uint8_t *md_sample_filter __attribute__((visibility("hidden")));
bool md_sample_draw(size_t size) __attribute__((visibility("hidden")));
bool md_sample_forget(const void *p, uint8_t *c) __attribute__((visibility("hidden")));

#define MD_SAMPLE_FILTER_BITS 20

static inline size_t md_sample_slot(const void *p)
{
	uintptr_t a = (uintptr_t)p;

	return (size_t)((a >> 4) ^ (a >> (4 + MD_SAMPLE_FILTER_BITS)) ^ (a >> (4 + 2 * MD_SAMPLE_FILTER_BITS))) &
	       (((size_t)1 << MD_SAMPLE_FILTER_BITS) - 1);
}

static inline bool md_sample_alloc(size_t size)
{
	int64_t left;

	if (size >= md_sample_bytes)
		return true;
	left = md_sample_left - (int64_t)size;
	if (__builtin_expect(left > 0, 1)) {
		md_sample_left = left;
		return false;
	}
	return md_sample_draw(size);
}

static inline bool md_sample_take(const void *p)
{
	uint8_t *c;

	if (p == NULL)
		return false;
	c = &md_sample_filter[md_sample_slot(p)];
	if (__builtin_expect(__atomic_load_n(c, __ATOMIC_RELAXED) == 0, 1))
		return false;
	return md_sample_forget(p, c);
}

#endif
