// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * free_track: a freed block is held back, filled with the free fill, with
 * the backtrace of its free, and checked for writes made after its free
 * when it leaves the list, the oldest first, or when the program exits.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backtrace.h"
#include "bytes.h"
#include "config.h"
#include "debug.h"
#include "free_track.h"
#include "guard.h"
#include "log.h"
#include "ptrtab.h"
#include "real.h"

/* free_track: a FIFO ring of freed blocks still held, with their free backtraces. */
struct freed {
	void *ptr;  /* user pointer */
	void *orig; /* what glibc returned */
	size_t nframes;
};
static struct freed *g_ft;
static uintptr_t *g_ft_frames; /* free_track_backtrace_num_frames per entry */
static size_t g_ft_head, g_ft_count;
/* free_track: each held user pointer to its slot in g_ft, under the lock. */
static struct md_ptrtab g_ft_index = MD_PTRTAB_INITIALIZER;
static bool g_finalized;

void md_free_track_init(void)
{
	g_ft = md_real_calloc(md_cfg.free_track_allocations, sizeof(*g_ft));
	if (md_cfg.free_track_backtrace_num_frames > 0)
		g_ft_frames = md_real_calloc(md_cfg.free_track_allocations * md_cfg.free_track_backtrace_num_frames,
					    sizeof(uintptr_t));
	if (g_ft == NULL)
		md_cfg.options &= ~(uint64_t)MD_FREE_TRACK;
	if (g_ft_frames == NULL)
		md_cfg.free_track_backtrace_num_frames = 0;
}

void md_free_track_fork_prepare(void)
{
	md_ptrtab_fork_prepare(&g_ft_index);
}

void md_free_track_fork_parent(void)
{
	md_ptrtab_fork_parent(&g_ft_index);
}

void md_free_track_fork_child(void)
{
	md_ptrtab_fork_child(&g_ft_index);
}

/* find_freed returns free_track's entry for ptr if it holds the block. Lock held. */
static struct freed *find_freed(void *ptr)
{
	uintptr_t slot;

	if (g_ft == NULL || !md_ptrtab_get(&g_ft_index, ptr, &slot))
		return NULL;
	return &g_ft[slot];
}

static const uintptr_t *freed_frames(const struct freed *e)
{
	return g_ft_frames + (size_t)(e - g_ft) * md_cfg.free_track_backtrace_num_frames;
}

bool md_free_track_holds(void *ptr)
{
	return find_freed(ptr) != NULL;
}

void md_free_track_log_free(void *ptr)
{
	struct freed *e = find_freed(ptr);

	if (e != NULL && e->nframes > 0) {
		md_log('E', "Backtrace of original free:");
		md_backtrace_log(freed_frames(e), e->nframes);
	}
}

static void log_free_error(const struct freed *e, const uint8_t *p, size_t bytes)
{
	md_log('E', "%s", MD_LOG_DIVIDER);
	md_log('E', "+++ ALLOCATION %p USED AFTER FREE", e->ptr);
	for (size_t i = 0; i < bytes; i++)
		if (p[i] != MD_FILL_FREE_VALUE)
			md_log('E', "  allocation[%zu] = 0x%02x (expected 0x%02x)", i, p[i],
			       MD_FILL_FREE_VALUE);
	if (e->nframes > 0) {
		md_log('E', "Backtrace at time of free:");
		md_backtrace_log(freed_frames(e), e->nframes);
	}
	md_log('E', "%s", MD_LOG_DIVIDER);
	md_maybe_abort();
}

/* verify_freed checks that a block kept by free_track still holds the free fill. Lock held. */
static void verify_freed(const struct freed *e)
{
	const uint8_t *p = e->ptr;
	size_t bytes;

	if (md_header) {
		struct md_header *h = md_get_header(e->ptr);

		if (h->tag != MD_DEBUG_FREE_TAG) {
			md_log('E', "%s", MD_LOG_DIVIDER);
			md_log('E', "+++ ALLOCATION 0x%lx HAS CORRUPTED HEADER TAG 0x%x AFTER FREE",
			       (unsigned long)(uintptr_t)e->ptr, h->tag);
			md_log('E', "%s", MD_LOG_DIVIDER);
			md_maybe_abort();
			return;
		}
		bytes = h->usable_size;
	} else {
		bytes = md_real_usable_size(e->ptr);
	}
	bytes = md_min_size(bytes, md_cfg.fill_on_free_bytes);
	/* One report for the block, however many bytes differ. */
	if (md_first_bad(p, bytes, MD_FILL_FREE_VALUE) != bytes)
		log_free_error(e, p, bytes);
}

/* free_track_add keeps a freed block; returns the block to really free, if any. */
static void *free_track_add(void *ptr, void *orig, const uintptr_t *frames, size_t nframes)
{
	size_t cap = md_cfg.free_track_allocations, slot;
	void *evicted = NULL;
	struct freed *e;

	md_lock();
	if (g_finalized) {
		md_unlock();
		return orig;
	}
	/* Held already: a second free that raced the first past the checks. */
	if (md_ptrtab_get(&g_ft_index, ptr, NULL)) {
		md_unlock();
		return NULL;
	}
	/* The next free slot, or the oldest entry's when the list is full. */
	slot = (g_ft_head + g_ft_count) % cap;
	if (!md_ptrtab_put(&g_ft_index, ptr, slot)) {
		/* No memory to index the block: it is not kept. */
		md_unlock();
		return orig;
	}
	if (g_ft_count == cap) {
		e = &g_ft[g_ft_head];
		verify_freed(e);
		md_ptrtab_take(&g_ft_index, e->ptr, NULL);
		evicted = e->orig;
		g_ft_head = (g_ft_head + 1) % cap;
		g_ft_count--;
	}
	e = &g_ft[slot];
	e->ptr = ptr;
	e->orig = orig;
	e->nframes = nframes;
	if (nframes > 0)
		memcpy(g_ft_frames + (size_t)(e - g_ft) * md_cfg.free_track_backtrace_num_frames, frames,
		       nframes * sizeof(uintptr_t));
	g_ft_count++;
	md_unlock();
	return evicted;
}

/*
 * At exit every block still held is checked. ctl.c's
 * log_allocator_stats_on_exit comes after: destructors run in reverse, and
 * the files are linked in the order of their names.
 */
__attribute__((destructor)) static void md_fini(void)
{
	if (__atomic_load_n(&md_state, __ATOMIC_ACQUIRE) != MD_ST_ON || !(md_cfg.options & MD_FREE_TRACK))
		return;
	md_shim_begin(__builtin_frame_address(0));
	md_lock();
	g_finalized = true;
	for (size_t i = 0; i < g_ft_count; i++)
		verify_freed(&g_ft[(g_ft_head + i) % md_cfg.free_track_allocations]);
	md_unlock();
	md_tls.in_shim = 0;
}

static bool backtrace_size_ok(size_t size)
{
	if (!(md_cfg.options & MD_BACKTRACE_SPECIFIC_SIZES))
		return true;
	return size >= md_cfg.backtrace_min_size_bytes && size <= md_cfg.backtrace_max_size_bytes;
}

void *md_free_track(void *ptr, void *orig, size_t bytes)
{
	uintptr_t frames[MD_MAX_BACKTRACE_FRAMES];
	size_t n = 0;

	if (md_cfg.free_track_backtrace_num_frames > 0 && backtrace_size_ok(bytes))
		n = md_backtrace(md_tls.fp, frames, md_cfg.free_track_backtrace_num_frames);
	return free_track_add(ptr, orig, frames, n);
}
