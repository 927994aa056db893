// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * verify_pointers (pointer.c): whether a pointer passed to free, realloc or
 * malloc_usable_size is a live block of the debug allocator.
 */
#ifndef MD_POINTER_H
#define MD_POINTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/single_threaded.h>

#include "config.h"
#include "debug.h"
#include "guard.h"
#include "ptrtab.h"

/*
 * verify_pointers (TRACK_ALLOCS, which the guards, backtrace, free_track and
 * leak_track also set, as on Android) without a header: every live block the
 * debug allocator handed out, with its requested size. (With a header, the
 * header's tag and check word say whether a block is live.) md_live_lost is
 * set for good when an insertion fails for want of memory: absence from the
 * table then proves nothing and the check is off.
 */
extern struct md_ptrtab md_live __attribute__((visibility("hidden")));
extern bool md_live_lost __attribute__((visibility("hidden")));

static inline bool md_tracking(void)
{
	return (md_cfg.options & MD_TRACK_ALLOCS) && !__atomic_load_n(&md_live_lost, __ATOMIC_ACQUIRE);
}

/*
 * md_header_tracked: with a header, verify_pointers given keeps the table
 * too, so that a pointer is known to be a live block before its header is
 * read: a wild pointer (free((void *)0xdead0000)) is reported as UNKNOWN
 * POINTER where reading its header would kill the program.
 */
static inline bool md_header_tracked(void)
{
	return md_cfg.verify_pointers && !__atomic_load_n(&md_live_lost, __ATOMIC_ACQUIRE);
}

/*
 * md_track_new enters a block the debug allocator hands out, or one that a
 * realloc took and gives back; returns ptr. A block with a header is live
 * by its tag.
 */
static MD_INLINE void *md_track_new(void *ptr, size_t size)
{
	if (ptr == NULL)
		return NULL;
	if (md_header) {
		__atomic_store_n(&md_get_header(ptr)->tag, MD_DEBUG_TAG, __ATOMIC_RELEASE);
		if (!md_header_tracked())
			return ptr;
	} else if (!md_tracking()) {
		return ptr;
	}
	if (!md_ptrtab_put(&md_live, ptr, size))
		__atomic_store_n(&md_live_lost, true, __ATOMIC_RELEASE);
	return ptr;
}

/* md_pointer_error logs a bad pointer passed to fn: kind is one of enum md_bad_pointer. */
enum md_bad_pointer { MD_BAD_UNKNOWN, MD_BAD_FREED, MD_BAD_TAG };

bool md_pointer_error(void *ptr, const char *fn, enum md_bad_pointer kind, uint32_t tag)
	__attribute__((noinline, cold, visibility("hidden")));

/*
 * md_verify_not_freed is md_verify_pointer's check without a header or the
 * table: whether free_track holds ptr, freed already.
 */
bool md_verify_not_freed(void *ptr, const char *fn) __attribute__((visibility("hidden")));

/*
 * md_pointer_unknown reports a pointer that the table of a tracked header
 * does not hold: a block the shim freed (its header, read without a fault,
 * bears the free tag and its address's check word) is USED AFTER FREE,
 * anything else UNKNOWN POINTER. Returns false.
 */
bool md_pointer_unknown(void *ptr, const char *fn) __attribute__((noinline, cold, visibility("hidden")));

/*
 * md_verify_pointer checks ptr before fn uses it, as Android's
 * VerifyPointer: the header tag first, then whether the block is live.
 * With a header that is the header's check word, bound to the block's
 * address; without one, the table of live blocks. With taken (free and
 * realloc) the block stops being live in the same step (its tag becomes
 * the free tag, or it leaves the table), so two threads freeing one block
 * cannot both pass, and *taken is its size; a realloc gives it back with
 * md_track_new. Without either, a block free_track holds is still caught
 * as used after free. On failure the error is logged and fn must not touch
 * the block.
 */
static MD_INLINE bool md_verify_pointer(void *ptr, const char *fn, uintptr_t *taken)
{
	uint32_t tag;
	bool ok;

	if (md_header) {
		struct md_header *h = md_get_header(ptr);

		if (md_header_tracked()) {
			ok = taken != NULL ? md_ptrtab_take(&md_live, ptr, NULL) : md_ptrtab_get(&md_live, ptr, NULL);
			if (__builtin_expect(!ok, 0))
				return md_pointer_unknown(ptr, fn);
		}
		tag = __atomic_load_n(&h->tag, __ATOMIC_RELAXED);
		if (__builtin_expect(tag != MD_DEBUG_TAG, 0))
			return md_pointer_error(ptr, fn, tag == MD_DEBUG_FREE_TAG ? MD_BAD_FREED : MD_BAD_TAG, tag);
		if (__builtin_expect(h->check != md_addr_check(ptr), 0))
			return md_pointer_error(ptr, fn, MD_BAD_UNKNOWN, tag);
		if (taken != NULL) {
			/*
			 * Two threads freeing one block: one of them takes it.
			 * With one thread, which nothing can race, a store does
			 * (a third of what a guarded malloc/free pair costs).
			 */
			if (__libc_single_threaded)
				__atomic_store_n(&h->tag, MD_DEBUG_FREE_TAG, __ATOMIC_RELAXED);
			else if (!__atomic_compare_exchange_n(&h->tag, &tag, MD_DEBUG_FREE_TAG, false,
							      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				return md_pointer_error(ptr, fn,
							tag == MD_DEBUG_FREE_TAG ? MD_BAD_FREED : MD_BAD_TAG, tag);
			*taken = h->size;
		}
		return true;
	}
	if (md_tracking()) {
		if (taken != NULL)
			ok = md_ptrtab_take(&md_live, ptr, taken);
		else
			ok = md_ptrtab_get(&md_live, ptr, NULL);
		return ok || md_pointer_error(ptr, fn, MD_BAD_UNKNOWN, 0);
	}
	if (md_cfg.options & MD_FREE_TRACK)
		return md_verify_not_freed(ptr, fn);
	return true;
}

/* Around fork, after free_track's table (debug.c). */
void md_pointer_fork_prepare(void) __attribute__((visibility("hidden")));
void md_pointer_fork_parent(void) __attribute__((visibility("hidden")));
void md_pointer_fork_child(void) __attribute__((visibility("hidden")));

#endif
