// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Batched probe sites (batch.c). */
#ifndef MD_BATCH_H
#define MD_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Batched sites (batch.c). With MDSHIM_BATCH=depth, the hooks of a shim
 * without checks hand allocations and frees over a buffer at a time, with
 * up to depth frames each, through mdshim_site_batch(b, used, epoch,
 * flags). struct md_batch is shared with mdtrace's probes and mdtrace
 * itself (bpf/mdtrace.bpf.c, tracer/batch.go): seq is odd while the buffer
 * is being handed over and emptied; used words of events follow, each
 * event a word of kind, frame count and epoch, then the block's address,
 * and for an allocation its size and its frames. REGISTER tells the probes
 * of a thread's new buffer, RETIRE of its end, INHERITED that a fork child
 * hands over calls made before the fork (its blocks are not a zygote
 * child's own).
 */
#define MD_BATCH_WORDS 440
#define MD_BATCH_HELD 48
#define MD_BATCH_HELD_BYTES (256 * 1024)
#define MD_BATCH_MAX_DEPTH 256
#define MD_BATCH_ALLOC 1
#define MD_BATCH_FREE 2
#define MD_BATCH_FRAMES_SHIFT 8
#define MD_BATCH_EPOCH_SHIFT 20
#define MD_BATCH_REGISTER 1
#define MD_BATCH_RETIRE 2
#define MD_BATCH_INHERITED 4

struct md_batch {
	uint64_t seq;
	uint64_t used;
	uint64_t words[MD_BATCH_WORDS];
};

/* A thread's buffer and what goes with it, in a page of its own. */
struct md_batch_thread {
	struct md_batch b;
	uintptr_t lo, hi; /* the thread's stack */
	struct md_batch_thread *prev, *next;
	unsigned nheld;
	int busy; /* inside a batched call: a nested one goes unbatched */
	size_t held_bytes;
	void *held[MD_BATCH_HELD];
};
_Static_assert(sizeof(struct md_batch_thread) <= 4096, "a thread's batch outgrew its page");

/*
 * md_batch_on tells whether the hooks batch, md_batch_depth the frames an
 * allocation holds; md_batch_init reads them from MDSHIM_BATCH, and takes
 * the allocator's malloc_usable_size, which bounds the bytes a thread
 * holds. md_batch_alloc and md_batch_free add
 * an event, fp being the hook's frame; false means the call goes to the
 * unbatched sites. md_batch_sync hands over the thread's events before an
 * unbatched call.
 */
extern bool md_batch_on __attribute__((visibility("hidden")));
extern unsigned md_batch_depth __attribute__((visibility("hidden")));
void md_batch_init(size_t (*usable_size)(void *));
bool md_batch_alloc(void *fp, void *ptr, size_t size);
bool md_batch_free(void *fp, void *ptr);
void md_batch_sync(void);

#endif
