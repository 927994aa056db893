// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The state of the debug allocator (debug.c), which the checks and the
 * hooks share: the options in force, the block layout they give, the
 * thread's state and the one lock. md_init sets the options and the layout
 * once, before the state is MD_ST_ON, and they do not change after.
 */
#ifndef MD_DEBUG_H
#define MD_DEBUG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "config.h"

/* MD_INLINE marks the functions of the hot paths of malloc and free. */
#define MD_INLINE inline __attribute__((always_inline))

enum { MD_ST_UNINIT, MD_ST_INITIALIZING, MD_ST_OFF, MD_ST_ON };

extern int md_state __attribute__((visibility("hidden")));
extern struct md_config md_cfg __attribute__((visibility("hidden")));
/* a guard is on: allocations carry a header */
extern bool md_header __attribute__((visibility("hidden")));
/* header start to user pointer */
extern size_t md_pointer_offset __attribute__((visibility("hidden")));
/* bytes added to every request */
extern size_t md_extra_bytes __attribute__((visibility("hidden")));
/*
 * The malloc_usable_size of the allocator the shim gets its blocks from
 * (see find_usable_size in debug.c).
 */
extern size_t (*md_real_usable_size)(void *) __attribute__((visibility("hidden")));
/* MDSHIM_RECORD: the probe sites get start times */
extern bool md_site_times __attribute__((visibility("hidden")));
/*
 * md_fast: the debug allocator is on, and neither record_allocs' start times
 * nor sampling are: malloc and free take their shortest path.
 */
extern bool md_fast __attribute__((visibility("hidden")));

/*
 * Per thread: inside the library (nested calls pass through), lock depth,
 * hook frame, and the frame that set in_shim (top: a call the library
 * makes runs below it); one variable, so that a hook finds them all from
 * one address.
 */
struct md_tls {
	int in_shim;
	int lock_depth;
	void *fp;
	void *top;
};
extern __thread struct md_tls md_tls __attribute__((tls_model("initial-exec"), visibility("hidden")));

/*
 * md_shim_begin marks the thread inside the library from frame, the
 * caller's own (md_internal_begin does it where it nests).
 */
#define md_shim_begin(frame)          \
	do {                          \
		md_tls.in_shim = 1;   \
		md_tls.top = (frame); \
	} while (0)

void md_left_by_jump(uintptr_t sp) __attribute__((visibility("hidden")));

/* md_init reads the options and sets the debug allocator up, once. */
void md_init(void) __attribute__((visibility("hidden")));

/* md_debug_on reports whether the debug allocator is on, setting it up on the first call. */
static inline bool md_debug_on(void)
{
	int s = __atomic_load_n(&md_state, __ATOMIC_ACQUIRE);

	if (s == MD_ST_ON)
		return true;
	if (s == MD_ST_OFF)
		return false;
	md_init();
	return __atomic_load_n(&md_state, __ATOMIC_ACQUIRE) == MD_ST_ON;
}

/*
 * md_internal_begin and md_internal_end bracket the library's own use of
 * code that may allocate (stdio, dlsym): calls made in between go straight
 * to glibc and are neither checked nor reported. They nest.
 */
void md_internal_begin(void);
void md_internal_end(void);

/* The one lock: protects the free-track list and keeps error blocks whole. */
extern pthread_mutex_t md_lock_mutex __attribute__((visibility("hidden")));

/* md_lock and md_unlock take and release the one lock. They nest in a thread. */
static inline void md_lock(void)
{
	if (md_tls.lock_depth++ == 0)
		pthread_mutex_lock(&md_lock_mutex);
}

static inline void md_unlock(void)
{
	if (--md_tls.lock_depth == 0)
		pthread_mutex_unlock(&md_lock_mutex);
}

static inline void md_maybe_abort(void)
{
	if (md_cfg.options & MD_ABORT_ON_ERROR)
		abort();
}

static inline size_t md_min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

#endif
