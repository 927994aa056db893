// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Batched probe sites (batch.c). */
#ifndef MD_BATCH_H
#define MD_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../abi/mdtrace_abi.h"

/*
 * Batched sites (batch.c). With MDSHIM_BATCH=depth, the hooks of a shim
 * without checks hand allocations and frees over a buffer at a time, with
 * up to depth frames each (MAX_STACK_DEPTH at most), through
 * mdshim_site_batch(b, used, epoch, flags). struct md_batch, its events
 * and the flags (BATCH_*) are shared with mdtrace's probes and mdtrace
 * itself: they are in abi/mdtrace_abi.h. A thread holds at most
 * MD_BATCH_HELD blocks and MD_BATCH_HELD_BYTES bytes freed until their
 * batch is handed over.
 */
#define MD_BATCH_HELD 64
#define MD_BATCH_HELD_BYTES (256 * 1024)
/*
 * The allocations a thread's free looks for in its batch, the newest
 * first, to take both calls back (batch.c, pair()).
 */
#define MD_BATCH_RECENT 16
#define MD_BATCH_NO_EVENT 0xffff
/* The blocks a thread last gave back to glibc, by a hash of their address (batch.c, given_back()). */
#define MD_BATCH_GIVEN 64

/*
 * A thread's buffer and what goes with it, in pages of its own. A held
 * block's word at offset 8 is kept in word8 while the batch's key stands
 * there (batch.c, keyed), and put back before glibc gets the block.
 */
struct md_batch_thread {
	struct md_batch b;
	uintptr_t lo, hi; /* the thread's stack */
	struct md_batch_thread *prev, *next;
	unsigned nheld;
	int busy; /* inside a batched call: a nested one goes unbatched */
	size_t held_bytes;
	void *held[MD_BATCH_HELD];
	uintptr_t word8[MD_BATCH_HELD];
	uint64_t keyed; /* the held blocks with a key, by index */
	/*
	 * The word offsets of the batch's newest allocation events, by
	 * nrecent modulo MD_BATCH_RECENT (MD_BATCH_NO_EVENT: taken back),
	 * and the allocations freed in their batch since the last hand-over.
	 */
	unsigned nrecent;
	uint16_t recent[MD_BATCH_RECENT];
	/* Their blocks, which a free compares first: a free of an older block looks at no event. */
	uintptr_t recent_ptr[MD_BATCH_RECENT];
	/*
	 * One more than the word offset of the batch's last event with
	 * frames (0: none), whose backtrace a later allocation with the same
	 * frames names by BATCH_STACK_PREV.
	 */
	uint16_t frames_at;
	/*
	 * The thread's walks (md_unwind_walks) when the last allocation with
	 * those frames or naming them was written: while no walk came since,
	 * that walk is the thread's last, and a walk that would repeat it
	 * (md_unwind_same) names them without being written.
	 */
	unsigned long frames_walk;
	uint64_t paired;
	/* Blocks the thread gave back to glibc, each until a batched allocation returns it (0: none). */
	uintptr_t given[MD_BATCH_GIVEN];
	/*
	 * In an early start, a buffer made before mdtrace was ready is not
	 * known to the probes until its first hand-over registers it; until
	 * then it is listed in mdshim_early_batches, at early_slot less one.
	 */
	unsigned early_slot;
	bool unregistered;
};
_Static_assert(BATCH_WORDS < MD_BATCH_NO_EVENT, "a word offset does not fit recent[]");
_Static_assert(MD_BATCH_HELD <= 64, "keyed has a bit a held block");
_Static_assert(sizeof(struct md_batch_thread) <= 12288, "a thread's batch outgrew its three pages");

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
/*
 * md_batch_start turns batches on with depth frames an allocation, as
 * md_batch_init does from MDSHIM_BATCH (inject.c calls it for a shim
 * loaded into a running process); false when they cannot be.
 */
bool md_batch_start(unsigned long depth, size_t (*usable_size)(void *));
/*
 * mdshim_inject_routed is 1 while inject.c routes the program's calls to
 * the hooks; md_inject_abandon gives them back to the allocator when
 * mdtrace is gone (inject.c). mdtrace reads it in the process's memory: a
 * shim at 0 whose slots were listed was given back, and may be started
 * again.
 */
extern unsigned long mdshim_inject_routed;
/*
 * md_batch_pending, set by inject.c, counts by a hash of their addresses
 * the allocations that the threads' batches hold and have not handed over
 * (abi/mdtrace_abi.h, INJECT_PENDING_BITS): a count goes down only once
 * the probes have the allocation, or once the thread took it back with
 * its free. The probes read it at a free of a block they do not know.
 */
extern uint32_t *md_batch_pending __attribute__((visibility("hidden")));
void md_inject_abandon(void) __attribute__((visibility("hidden")));
/*
 * md_early is set in an early start (ENV_EARLY, abi/mdtrace_abi.h): the
 * program runs before mdtrace has probed it, and the shim holds what it
 * would hand over until mdtrace writes mdshim_ready. md_early_wait waits
 * for it (EARLY_WAIT_MS at most, after which md_early is cleared and the
 * shim goes on as without it); md_early_hold is what an unbatched call
 * does first.
 */
extern bool md_early __attribute__((visibility("hidden")));
/*
 * md_early_start starts holding the hand-overs until mdtrace writes
 * mdshim_ready (mdtrace's pid tracer, 0 if none to look for), for a shim
 * injected into a running process (injected) or preloaded at a launch;
 * md_early_end stops holding them, ready or not.
 */
void md_early_start(pid_t tracer, bool injected) __attribute__((visibility("hidden")));
void md_early_end(void) __attribute__((visibility("hidden")));
extern volatile uint32_t mdshim_ready __attribute__((visibility("default")));
void md_early_wait(void) __attribute__((visibility("hidden")));

static inline bool md_early_pending(void)
{
	return __builtin_expect(__atomic_load_n(&md_early, __ATOMIC_RELAXED), 0) &&
	       __atomic_load_n(&mdshim_ready, __ATOMIC_ACQUIRE) != EARLY_READY;
}

static inline void md_early_hold(void)
{
	if (md_early_pending())
		md_early_wait();
}

bool md_batch_alloc(void *fp, void *ptr, size_t size);
bool md_batch_free(void *fp, void *ptr);
void md_batch_sync(void);
/*
 * md_batch_epoch moves the batches' epoch on, as a hand-over does, for a
 * free going to the unbatched site, and returns the new one.
 */
uint64_t md_batch_epoch(void);

#endif
