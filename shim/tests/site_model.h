// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The probes' model of site_model.c, for the tests of the hooks. */
#ifndef SITE_MODEL_H
#define SITE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* site_model_counts is what the probes saw, from the start of the program. */
struct site_model_counts {
	long allocs;	    /* blocks reported at the alloc site */
	long frees;	    /* calls of the free site */
	long unknown_frees; /* of a pointer the table did not hold */
	long double_allocs; /* a block reported while its pointer was live */
	long restored;	    /* blocks put back after a failed realloc */
	long live;	    /* blocks in the table */
	double bytes;	    /* sizes of the reported blocks */
	double est_blocks;  /* the reported blocks weighted by 1/(1-exp(-size/N)), 1 from N on */
	double est_bytes;   /* their sizes weighted likewise */
	long batches;	    /* batches handed over (mdshim_site_batch) */
	long framed;	    /* batched allocations that came with frames */
	long prev;	    /* of those, the ones that named the batch's last frames (BATCH_STACK_PREV) */
	long bad_events;    /* batch events that made no sense */
	long skipped;	    /* batch events of allocations freed in their batch (BATCH_SKIP) */
	long paired;	    /* allocations freed in their batch, as the hand-overs count them */
	uintptr_t last_frame; /* the first frame of the last batched allocation */
};

struct site_model_counts site_model_counts(void);

/* site_model_diff is what the probes saw between counts a and later counts b. */
struct site_model_counts site_model_diff(struct site_model_counts a, struct site_model_counts b);

/* site_model_last_frames copies up to max frames of the last batched allocation, and returns how many. */
size_t site_model_last_frames(uint64_t *out, size_t max);

/* site_model_live reports whether p is in the table and, if size is not NULL, its size. */
bool site_model_live(const void *p, size_t *size);

#endif
