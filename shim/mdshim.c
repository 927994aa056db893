// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * libmdshim.so: mdtrace's LD_PRELOAD library.
 *
 * With LIBC_DEBUG_MALLOC_OPTIONS set, it replaces the allocation functions
 * and applies Android malloc debug's memory-rewriting options: front and
 * rear guards, fill on allocation and on free, expand_alloc, free_track and
 * abort_on_error, with Android's header layout and error messages. Options
 * it does not implement are parsed and ignored. Memory comes from glibc's
 * __libc_* entry points (real.h), which the shim also defines, with dlsym
 * (dlsym.c), so that no call of the program's reaches the allocator past
 * it.
 *
 * This file holds the entry points. The hooks at the end are thin: they
 * pick the passthrough or the debug path and note their own frame for
 * backtraces. The debug path of each call, above them, checks the pointer
 * (pointer.h), runs each enabled check in a fixed order (the guards,
 * guard.h; the fills, fill.h; free_track, free_track.h), calls the real
 * allocator and records the block as live. The state they share and its
 * setup are in debug.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "config.h"
#include "ctl.h"
#include "debug.h"
#include "fill.h"
#include "free_track.h"
#include "guard.h"
#include "pointer.h"
#include "present.h"
#include "real.h"
#include "sample.h"
#include "site.h"

/* Largest request served; bit 31 of a recorded size is Android's zygote flag. */
#define MAX_SIZE ((size_t)0x7fffffff)

/* ---- the debug allocator ---- */

/* alloc_block is malloc without the tracking, which realloc does itself. */
static MD_INLINE void *alloc_block(size_t size)
{
	size_t real_size;
	void *ptr;

	if (size == 0)
		size = 1;
	real_size = size + md_extra_bytes;
	if (real_size < size || size > MAX_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	if (md_header) {
		void *orig = md_header_alloc(real_size);

		if (orig == NULL)
			return NULL;
		ptr = md_init_header(orig, orig, size);
	} else {
		ptr = md_real_malloc(real_size);
	}
	if (ptr != NULL && (md_cfg.options & MD_FILL_ON_ALLOC))
		md_fill_alloc(ptr, 0);
	return ptr;
}

static MD_INLINE void *internal_malloc(size_t size)
{
	return md_track_new(alloc_block(size), size);
}

/*
 * internal_free frees a block md_verify_pointer has taken: with a header,
 * its tag is the free tag already.
 */
static MD_INLINE void internal_free(void *ptr)
{
	void *orig = ptr;
	size_t bytes = 0;

	if (md_header) {
		struct md_header *h = md_get_header(ptr);

		md_check_guards(ptr, h);
		orig = h->orig_pointer;
		bytes = h->usable_size;
	} else if (md_cfg.options & (MD_FILL_ON_FREE | MD_FREE_TRACK)) {
		bytes = md_real_usable_size(ptr);
	}
	if (md_cfg.options & MD_FILL_ON_FREE)
		md_fill_free(ptr, bytes);
	if (md_cfg.options & MD_FREE_TRACK) {
		orig = md_free_track(ptr, orig, bytes);
		if (orig == NULL)
			return;
	}
	md_real_free(orig);
}

static MD_INLINE void debug_free(void *ptr)
{
	uintptr_t size;

	if (ptr == NULL)
		return;
	if (!md_verify_pointer(ptr, "free", &size))
		return;
	internal_free(ptr);
}

static void *debug_calloc(size_t nmemb, size_t bytes)
{
	size_t size, real_size;
	void *ptr;

	if (__builtin_mul_overflow(nmemb, bytes, &size)) {
		errno = ENOMEM;
		return NULL;
	}
	if (size == 0)
		size = 1;
	real_size = size + md_extra_bytes;
	if (real_size < size || real_size > MAX_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	if (md_header) {
		void *orig = md_header_alloc(real_size);

		if (orig == NULL)
			return NULL;
		memset(orig, 0, md_real_usable_size(orig));
		ptr = md_init_header(orig, orig, size);
	} else {
		ptr = md_real_calloc(1, real_size);
	}
	return md_track_new(ptr, size);
}

static void *debug_memalign(size_t alignment, size_t bytes)
{
	void *ptr;

	if (bytes == 0)
		bytes = 1;
	if (bytes > MAX_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	if (alignment > (SIZE_MAX >> 1) + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (md_header) {
		size_t real_size;
		uintptr_t value;
		void *orig;

		if ((alignment & (alignment - 1)) != 0) {
			size_t a = 1;

			while (a < alignment)
				a <<= 1;
			alignment = a;
		}
		if (alignment < MD_MIN_ALIGN)
			alignment = MD_MIN_ALIGN;
		real_size = alignment + bytes + md_extra_bytes;
		if (real_size < bytes) {
			errno = ENOMEM;
			return NULL;
		}
		orig = md_real_malloc(real_size);
		if (orig == NULL)
			return NULL;
		value = (uintptr_t)orig + md_pointer_offset;
		value += (-value) % alignment;
		ptr = md_init_header((struct md_header *)(value - md_pointer_offset), orig, bytes);
	} else {
		size_t real_size = bytes + md_extra_bytes;

		if (real_size < bytes) {
			errno = ENOMEM;
			return NULL;
		}
		ptr = md_real_memalign(alignment, real_size);
	}
	if (ptr != NULL && (md_cfg.options & MD_FILL_ON_ALLOC))
		md_fill_alloc(ptr, 0);
	return md_track_new(ptr, bytes);
}

/* realloc_block is realloc of a verified block, without the tracking. */
static void *realloc_block(void *ptr, size_t bytes)
{
	size_t real_size, prev_size;
	void *new_ptr;

	if (bytes == 0) {
		internal_free(ptr);
		return NULL;
	}
	real_size = bytes;
	if (md_cfg.options & MD_EXPAND_ALLOC) {
		real_size += md_cfg.expand_alloc_bytes;
		if (real_size < bytes) {
			errno = ENOMEM;
			return NULL;
		}
	}
	if (bytes > MAX_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	if (md_header) {
		struct md_header *h = md_get_header(ptr);

		if (real_size == h->size)
			return ptr;
		if (real_size < h->usable_size) {
			h->size = real_size;
			if (md_cfg.options & MD_REAR_GUARD) {
				h->usable_size = real_size;
				memset((uint8_t *)ptr + real_size, MD_REAR_GUARD_VALUE,
				       md_cfg.rear_guard_bytes);
			}
			return ptr;
		}
		new_ptr = alloc_block(bytes);
		if (new_ptr == NULL) {
			errno = ENOMEM;
			return NULL;
		}
		/*
		 * Android copies the old block's whole usable size, which with a
		 * rear guard and expand_alloc is more than the new block holds
		 * when a realloc shrinks a block by less than expand_alloc's
		 * bytes: the copy ran into the new block's rear guard, reported
		 * then as corrupted. Copied: what both blocks hold.
		 */
		prev_size = md_min_size(h->usable_size, md_usable_size(new_ptr));
		memcpy(new_ptr, ptr, prev_size);
		internal_free(ptr);
	} else {
		prev_size = md_real_usable_size(ptr);
		new_ptr = md_real_realloc(ptr, real_size);
		if (new_ptr == NULL)
			return NULL;
	}
	if (md_cfg.options & MD_FILL_ON_ALLOC)
		md_fill_alloc(new_ptr, prev_size);
	return new_ptr;
}

/*
 * debug_realloc takes the block out of the table while it verifies it and
 * enters the result, or the old block again if it is still the caller's
 * (Android leaves a block whose realloc failed out of the table).
 */
static void *debug_realloc(void *ptr, size_t bytes)
{
	uintptr_t old_size = 0;
	void *new_ptr;

	if (ptr == NULL)
		return internal_malloc(bytes);
	if (!md_verify_pointer(ptr, "realloc", &old_size))
		return NULL;
	new_ptr = realloc_block(ptr, bytes);
	if (new_ptr != NULL)
		return md_track_new(new_ptr, bytes);
	if (bytes != 0)
		md_track_new(ptr, old_size);
	return NULL;
}

static size_t debug_malloc_usable_size(void *ptr)
{
	if (ptr == NULL)
		return 0;
	if (!md_verify_pointer(ptr, "malloc_usable_size", NULL))
		return 0;
	return md_usable_size(ptr);
}

static int powerof2(size_t x)
{
	return (x & (x - 1)) == 0;
}

/* ---- exported hooks ---- */

/*
 * ENTER records the hook's own frame, the start of the frame-pointer walk:
 * it holds the caller's frame pointer and the return address into the
 * caller. Taking the frame address also gives the hook a frame pointer.
 */
#define ENTER()                                         \
	do {                                            \
		md_tls.fp = __builtin_frame_address(0); \
		md_shim_begin(md_tls.fp);               \
	} while (0)
#define LEAVE() (md_tls.in_shim = 0)

/*
 * A site mdtrace probes no longer starts with its 5-byte NOP (0f 1f 44 00
 * 00): the kernel puts a breakpoint or a call there. The hooks look at
 * that first byte, in their process's own copy of the page, and call a
 * site only while it is probed: a call that nobody watches costs about a
 * nanosecond, a fifth of what the shim's hooks cost beyond glibc.
 */
#define SITE_PROBED(site) md_site_probed((const void *)(uintptr_t)(site))
/*
 * In an early start, a call that goes to a site before mdtrace is ready
 * waits for it (md_early_hold): unprobed, the site would lose the call.
 */
#define REPORT_ALLOC(...)                                    \
	do {                                               \
		md_early_hold();                           \
		if (SITE_PROBED(mdshim_site_alloc))        \
			mdshim_site_alloc(__VA_ARGS__, 0); \
	} while (0)
/* REPORT_ALLOC with the old block's PRESENT_BYTES (site_present). */
#define REPORT_ALLOC_PRESENT(...)                            \
	do {                                               \
		md_early_hold();                           \
		if (SITE_PROBED(mdshim_site_alloc))        \
			mdshim_site_alloc(__VA_ARGS__);    \
	} while (0)
#define REPORT_FREE(...)                                     \
	do {                                               \
		md_early_hold();                           \
		if (SITE_PROBED(mdshim_site_free))         \
			mdshim_site_free(__VA_ARGS__);     \
	} while (0)

/*
 * BATCHED reports whether the thread's batch took the allocation r of size
 * bytes (batch.c; a failed one needs no report): the hook then returns it.
 * A macro, so that the frame the batch walks from is the hook's.
 */
#define BATCHED(r, size) \
	(md_batch_on && ((r) == NULL || md_batch_alloc(__builtin_frame_address(0), (r), (size))))

/*
 * site_start is the start time of a call for the probe sites: only while
 * mdtrace records calls, so that tracing alone costs no clock read.
 */
static inline uint64_t site_start(void)
{
	struct timespec ts;

	if (!md_site_times)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * site_new reports whether a new block r of size bytes goes to the probe
 * sites: always, unless sampling, which notes the blocks it picks.
 */
static inline bool site_new(void *r, size_t size)
{
	if (md_sample_bytes == 0)
		return true;
	if (r == NULL || !md_sample_alloc(size))
		return false;
	/*
	 * A shim mdtrace loaded into the running process, which samples
	 * without batches, finds at a sampled allocation that mdtrace is
	 * gone, and gives the program's calls back to the allocator (unless
	 * mdtrace has routed them before probing the sites, and is not ready).
	 */
	if (mdshim_inject_routed && !md_site_probed((const void *)(uintptr_t)mdshim_site_alloc) && !md_early_pending())
		md_inject_abandon();
	return md_sample_mark(r);
}

/* site_old reports whether the free of a block goes to the probe sites. */
static inline bool site_old(void *ptr)
{
	return ptr != NULL && (md_sample_bytes == 0 || md_sample_take(ptr));
}

/*
 * site_present is the PRESENT_BYTES of a block about to be freed or
 * reallocated, plus one (0: none), while mdtrace records calls. Where the
 * shim checks pointers (a header, verify_pointers) it is not read: the
 * pointer is not verified yet, and a bad one must be reported, not read.
 */
static inline uint64_t site_present(void *ptr, bool on)
{
	if (!md_site_times || ptr == NULL || (on && (md_header || md_tracking())))
		return 0;
	return (uint64_t)(md_present_bytes(ptr, md_real_usable_size(ptr)) + 1);
}

/* site_free_done reports the end of a free while mdtrace records calls. */
static inline void site_free_done(void *ptr, uint64_t start, uint64_t present)
{
	if (md_site_times && ptr != NULL)
		REPORT_ALLOC_PRESENT(NULL, CALL_FREE, (uintptr_t)ptr, 0, start, present);
}

/* fast_path reports whether a hook may take the shortest path (md_fast). */
static MD_INLINE bool fast_path(void)
{
	return __builtin_expect(__atomic_load_n(&md_fast, __ATOMIC_ACQUIRE) &&
					!__atomic_load_n(&md_ctl_pending, __ATOMIC_RELAXED),
				1);
}

void *malloc(size_t size)
{
	uint64_t start;
	void *r;

	if (md_tls.in_shim)
		return md_real_malloc(size);
	if (fast_path()) {
		ENTER();
		r = internal_malloc(size);
		LEAVE();
		REPORT_ALLOC(r, CALL_MALLOC, size, 0, 0);
		return r;
	}
	md_ctl_poll();
	if (md_debug_on()) {
		start = site_start();
		ENTER();
		r = internal_malloc(size);
		LEAVE();
	} else {
		start = site_start();
		r = md_real_malloc(size);
		if (md_sample_bytes != 0) {
			if (site_new(r, size) && !BATCHED(r, size))
				REPORT_ALLOC(r, CALL_MALLOC, size, 0, start);
			return r;
		}
		if (BATCHED(r, size))
			return r;
	}
	if (site_new(r, size))
		REPORT_ALLOC(r, CALL_MALLOC, size, 0, start);
	return r;
}

void free(void *ptr)
{
	uint64_t start, present;
	bool on;

	if (md_tls.in_shim) {
		md_real_free(ptr);
		return;
	}
	if (fast_path()) {
		if (ptr == NULL)
			return;
		REPORT_FREE(ptr, CALL_FREE, 0);
		ENTER();
		debug_free(ptr);
		LEAVE();
		return;
	}
	md_ctl_poll();
	on = md_debug_on();
	if (!on && md_batch_on && ptr != NULL) {
		/* Sampling (--all --inject): only a sampled block's free is told. */
		if (md_sample_bytes != 0 && !md_sample_take(ptr)) {
			md_real_free(ptr);
			return;
		}
		if (md_batch_free(__builtin_frame_address(0), ptr))
			return;
		if (md_sample_bytes != 0) {
			REPORT_FREE(ptr, CALL_FREE, md_batch_epoch());
			md_real_free(ptr);
			return;
		}
	}
	start = site_start();
	present = site_present(ptr, on);
	if (site_old(ptr))
		REPORT_FREE(ptr, CALL_FREE, md_batch_on ? md_batch_epoch() : 0);
	if (on) {
		ENTER();
		debug_free(ptr);
		LEAVE();
	} else {
		md_real_free(ptr);
	}
	site_free_done(ptr, start, present);
}

void *calloc(size_t nmemb, size_t size)
{
	uint64_t start;
	void *r;

	if (md_tls.in_shim)
		return md_real_calloc(nmemb, size);
	if (md_debug_on()) {
		start = site_start();
		ENTER();
		r = debug_calloc(nmemb, size);
		LEAVE();
	} else {
		start = site_start();
		r = md_real_calloc(nmemb, size);
		if (md_sample_bytes != 0) {
			if (site_new(r, nmemb * size) && !BATCHED(r, nmemb * size))
				REPORT_ALLOC(r, CALL_CALLOC, nmemb, size, start);
			return r;
		}
		if (BATCHED(r, nmemb * size))
			return r;
	}
	if (site_new(r, nmemb * size))
		REPORT_ALLOC(r, CALL_CALLOC, nmemb, size, start);
	return r;
}

/* do_realloc is realloc and reallocarray after the size is known. */
static MD_INLINE void *do_realloc(void *ptr, size_t size)
{
	bool on, old_site, new_site;
	uint64_t start, present;
	void *r;

	md_ctl_poll();
	on = md_debug_on();
	start = site_start();
	present = site_present(ptr, on);
	/*
	 * Sampling decides on the new block before the call. The old block,
	 * if it goes to the sites, leaves the table as a realloc's, so that
	 * it comes back if the realloc fails, whatever the new decision.
	 */
	old_site = site_old(ptr);
	new_site = md_sample_bytes == 0 || (size != 0 && md_sample_alloc(size));
	/*
	 * A realloc goes to the unbatched sites, after the thread's batch;
	 * one that goes to no site (neither block sampled) leaves it.
	 */
	if (md_batch_on && (old_site || new_site))
		md_batch_sync();
	/*
	 * Batching, the block's allocation may still be in another thread's
	 * batch: its free is kept aside with an epoch of its own, as a free
	 * at this site is.
	 */
	if (old_site)
		REPORT_FREE(ptr, CALL_REALLOC, md_batch_on ? md_batch_epoch() : 0);
	if (on) {
		ENTER();
		r = debug_realloc(ptr, size);
		LEAVE();
	} else {
		r = md_real_realloc(ptr, size);
	}
	if (md_sample_bytes == 0) {
		REPORT_ALLOC_PRESENT(r, CALL_REALLOC, (uintptr_t)ptr, size, start, present);
		return r;
	}
	if (r == NULL && size != 0) {
		/* Failed: the old block stays as it was, sampled or not. */
		if (old_site && md_sample_mark(ptr))
			REPORT_ALLOC(NULL, CALL_REALLOC, (uintptr_t)ptr, size, start);
		return r;
	}
	/* Else the old block is gone (its saved entry is never restored). */
	if (!new_site || r == NULL || !md_sample_mark(r))
		return r;
	if (old_site)
		REPORT_ALLOC(r, CALL_REALLOC, (uintptr_t)ptr, size, start);
	else
		REPORT_ALLOC(r, CALL_MALLOC, size, 0, start);
	return r;
}

void *realloc(void *ptr, size_t size)
{
	if (md_tls.in_shim)
		return md_real_realloc(ptr, size);
	return do_realloc(ptr, size);
}

void *reallocarray(void *ptr, size_t nmemb, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	if (md_tls.in_shim)
		return md_real_realloc(ptr, total);
	return do_realloc(ptr, total);
}

/* do_memalign is the memalign family once the arguments are checked. */
static MD_INLINE void *do_memalign(size_t alignment, size_t size)
{
	uint64_t start;
	void *r;

	if (md_debug_on()) {
		start = site_start();
		ENTER();
		r = debug_memalign(alignment, size);
		LEAVE();
	} else {
		start = site_start();
		r = md_real_memalign(alignment, size);
		if (md_sample_bytes != 0) {
			if (site_new(r, size) && !BATCHED(r, size))
				REPORT_ALLOC(r, CALL_MEMALIGN, alignment, size, start);
			return r;
		}
		if (BATCHED(r, size))
			return r;
	}
	if (site_new(r, size))
		REPORT_ALLOC(r, CALL_MEMALIGN, alignment, size, start);
	return r;
}

void *memalign(size_t alignment, size_t size)
{
	if (md_tls.in_shim)
		return md_real_memalign(alignment, size);
	return do_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size)
{
	if (md_tls.in_shim)
		return md_real_memalign(alignment, size);
	if (md_debug_on() && (alignment == 0 || !powerof2(alignment) || size % alignment != 0)) {
		errno = EINVAL;
		return NULL;
	}
	return do_memalign(alignment, size);
}

int posix_memalign(void **memptr, size_t alignment, size_t size)
{
	int saved_errno = errno;
	void *r;

	if (alignment < sizeof(void *) || !powerof2(alignment))
		return EINVAL;
	if (md_tls.in_shim)
		r = md_real_memalign(alignment, size);
	else
		r = do_memalign(alignment, size);
	errno = saved_errno;
	if (r == NULL)
		return ENOMEM;
	*memptr = r;
	return 0;
}

void *valloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (md_tls.in_shim)
		return md_real_memalign(page, size);
	return do_memalign(page, size);
}

void *pvalloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t rounded;

	if (size == 0)
		size = 1;
	rounded = (size + page - 1) & ~(page - 1);
	if (rounded < size) {
		errno = ENOMEM;
		return NULL;
	}
	if (md_tls.in_shim)
		return md_real_memalign(page, rounded);
	return do_memalign(page, rounded);
}

size_t malloc_usable_size(void *ptr)
{
	size_t r;

	if (md_tls.in_shim || !md_debug_on())
		return md_real_usable_size != NULL ? md_real_usable_size(ptr) : 0;
	ENTER();
	r = debug_malloc_usable_size(ptr);
	LEAVE();
	return r;
}

/*
 * The hooks under names of their own, for real.c, which must tell them
 * from the allocator's; and the allocator's own entry points, which a
 * program may call directly (glibc's __libc_malloc and the others), as
 * the same hooks.
 */
#define HOOK_ALIAS(name, hook) extern __typeof__(name) hook __attribute__((alias(#name), copy(name), visibility("hidden")))
HOOK_ALIAS(malloc, md_hook_malloc);
HOOK_ALIAS(free, md_hook_free);
HOOK_ALIAS(calloc, md_hook_calloc);
HOOK_ALIAS(realloc, md_hook_realloc);
HOOK_ALIAS(reallocarray, md_hook_reallocarray);
HOOK_ALIAS(memalign, md_hook_memalign);
HOOK_ALIAS(aligned_alloc, md_hook_aligned_alloc);
HOOK_ALIAS(posix_memalign, md_hook_posix_memalign);
HOOK_ALIAS(valloc, md_hook_valloc);
HOOK_ALIAS(pvalloc, md_hook_pvalloc);
HOOK_ALIAS(malloc_usable_size, md_hook_malloc_usable_size);
#ifndef MD_STATIC_REAL
#define LIBC_ALIAS(name, libc_name) extern __typeof__(name) libc_name __attribute__((alias(#name), copy(name)))
LIBC_ALIAS(malloc, __libc_malloc);
LIBC_ALIAS(free, __libc_free);
LIBC_ALIAS(calloc, __libc_calloc);
LIBC_ALIAS(realloc, __libc_realloc);
LIBC_ALIAS(memalign, __libc_memalign);
LIBC_ALIAS(valloc, __libc_valloc);
LIBC_ALIAS(pvalloc, __libc_pvalloc);
#endif

/* mdshim_version names the library's interface version, for mdtrace. */
__attribute__((visibility("default"))) const char *mdshim_version(void)
{
	return "mdshim 2";
}
