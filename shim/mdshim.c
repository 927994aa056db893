// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * libmdshim.so: mdtrace's LD_PRELOAD library.
 *
 * With LIBC_DEBUG_MALLOC_OPTIONS set, it replaces the allocation functions
 * and applies Android malloc debug's memory-rewriting options: front and
 * rear guards, fill on allocation and on free, expand_alloc, free_track and
 * abort_on_error, with Android's header layout and error messages. Options
 * it does not implement are parsed and ignored. Memory comes from glibc's
 * __libc_* entry points, so no dlsym is needed to reach the real allocator.
 *
 * The hooks below are thin: they pick the passthrough or the debug path and
 * note their own frame for backtraces; the checks live in the internal
 * functions further down.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <time.h>
#include <unistd.h>

#include "backtrace.h"
#include "batch.h"
#include "config.h"
#include "ctl.h"
#include "debug.h"
#include "log.h"
#include "ptrtab.h"
#include "real.h"
#include "sample.h"
#include "site.h"

#define DEBUG_TAG 0x1ee7d00dU
#define DEBUG_FREE_TAG 0x1cc7dccdU
/* Largest request served; bit 31 of a recorded size is Android's zygote flag. */
#define MAX_SIZE ((size_t)0x7fffffff)
#define LOG_DIVIDER "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***"

/*
 * header precedes every allocation when a guard is enabled. check binds it
 * to its block's address (addr_check), so that a header copied or left
 * elsewhere does not pass for a live block's: with it the header answers
 * for TRACK_ALLOCS what the table of live blocks answers without one.
 */
struct header {
	uint32_t tag;
	uint32_t check;
	void *orig_pointer;
	size_t size;
	size_t usable_size;
};

/* Space reserved for the header: sizeof(struct header) rounded to 16. */
#define HEADER_SPACE 32
_Static_assert(sizeof(struct header) <= HEADER_SPACE, "the header outgrew its space");

enum { ST_UNINIT, ST_INITIALIZING, ST_OFF, ST_ON };

static int g_state = ST_UNINIT;
static struct md_config g_cfg;
static bool g_header;          /* a guard is on: allocations carry a header */
static size_t g_pointer_offset; /* header start to user pointer */
static size_t g_extra_bytes;    /* bytes added to every request */
/*
 * The malloc_usable_size of the allocator the shim gets its blocks from
 * (see find_usable_size).
 */
static size_t (*real_usable_size)(void *);
static bool g_site_times;        /* MDSHIM_RECORD: the probe sites get start times */

/* The one lock: protects the free-track list and keeps error blocks whole. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_finalized;

/*
 * Per thread: inside the library (nested calls pass through), lock depth,
 * hook frame; one variable, so that a hook finds them all from one address.
 */
static __thread struct {
	int in_shim;
	int lock_depth;
	void *fp;
} t __attribute__((tls_model("initial-exec")));

/*
 * g_fast: the debug allocator is on, and neither record_allocs' start times
 * nor sampling are: malloc and free take their shortest path.
 */
static bool g_fast;

/* free_track: a FIFO ring of freed blocks still held, with their free backtraces. */
struct freed {
	void *ptr;  /* user pointer */
	void *orig; /* what glibc returned */
	size_t nframes;
};
static struct freed *g_ft;
static uintptr_t *g_ft_frames; /* free_track_backtrace_num_frames per entry */
static size_t g_ft_head, g_ft_count;
/* free_track: each held user pointer to its slot in g_ft, under g_lock. */
static struct md_ptrtab g_ft_index = MD_PTRTAB_INITIALIZER;

/*
 * verify_pointers (TRACK_ALLOCS, which the guards, backtrace, free_track and
 * leak_track also set, as on Android) without a header: every live block the
 * debug allocator handed out, with its requested size. (With a header, the
 * header's tag and check word say whether a block is live.) g_live_lost is
 * set for good when an insertion fails for want of memory: absence from the
 * table then proves nothing and the check is off.
 */
static struct md_ptrtab g_live = MD_PTRTAB_INITIALIZER;
static bool g_live_lost;

void md_internal_begin(void)
{
	t.in_shim++;
}

void md_internal_end(void)
{
	t.in_shim--;
}

static void md_lock(void)
{
	if (t.lock_depth++ == 0)
		pthread_mutex_lock(&g_lock);
}

static void md_unlock(void)
{
	if (--t.lock_depth == 0)
		pthread_mutex_unlock(&g_lock);
}

/* Lock order: g_lock before any table shard; a table call takes nothing else. */
static void fork_prepare(void)
{
	md_lock();
	md_ptrtab_fork_prepare(&g_ft_index);
	md_ptrtab_fork_prepare(&g_live);
}

static void fork_parent(void)
{
	md_ptrtab_fork_parent(&g_live);
	md_ptrtab_fork_parent(&g_ft_index);
	md_unlock();
}

static void fork_child(void)
{
	md_ptrtab_fork_child(&g_live);
	md_ptrtab_fork_child(&g_ft_index);
	pthread_mutex_init(&g_lock, NULL);
	t.lock_depth = 0;
}

static void maybe_abort(void)
{
	if (g_cfg.options & MD_ABORT_ON_ERROR)
		abort();
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* INLINE marks the functions of the hot paths of malloc and free. */
#define INLINE inline __attribute__((always_inline))

/*
 * Guards and fills are short runs of one byte value: a few 16-byte loads or
 * stores cover them without a call or a loop, the last ones overlapping.
 * Runs of over 128 bytes take a loop (checks) or memset (fills).
 */
typedef uint8_t md_v16 __attribute__((vector_size(16), aligned(1), may_alias));

#define RUN_SHORT 128

/* fill_bytes is memset(dst, v, n), quicker for the short runs of guards and fills. */
static INLINE void fill_bytes(void *dst, uint8_t v, size_t n)
{
	md_v16 x = (md_v16){ 0 } + v;
	uint8_t *p = dst, *e = p + n;

	if (n < 16 || n > RUN_SHORT) {
		memset(p, v, n);
		return;
	}
	if (n > 64) {
		*(md_v16 *)(p + 32) = x;
		*(md_v16 *)(p + 48) = x;
		*(md_v16 *)(e - 64) = x;
		*(md_v16 *)(e - 48) = x;
	}
	if (n > 32) {
		*(md_v16 *)(p + 16) = x;
		*(md_v16 *)(e - 32) = x;
	}
	*(md_v16 *)p = x;
	*(md_v16 *)(e - 16) = x;
}

/* ---- initialization ---- */

/*
 * find_usable_size returns the malloc_usable_size of the library that
 * defines the __libc_malloc the shim calls: glibc's, or a preloaded
 * allocator's that defines __libc_malloc too (tcmalloc). Not simply the
 * next malloc_usable_size: with jemalloc preloaded after the shim, that is
 * jemalloc's, which knows nothing of the glibc blocks the shim hands out;
 * calloc zeroed what it answered, and with guards its blocks went unchecked.
 */
static size_t (*find_usable_size(void))(void *)
{
	void *f = NULL, *h;
	Dl_info info;

	if (dladdr((void *)__libc_malloc, &info) != 0 && info.dli_fname != NULL) {
		h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
		if (h != NULL) {
			f = dlsym(h, "malloc_usable_size");
			dlclose(h);
		}
	}
	if (f == NULL)
		f = dlsym(RTLD_NEXT, "malloc_usable_size");
	return (size_t(*)(void *))f;
}

static void md_init(void)
{
	int expected = ST_UNINIT;
	char err[MD_ERR_MAX];
	const char *opts;

	if (!__atomic_compare_exchange_n(&g_state, &expected, ST_INITIALIZING, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		while (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == ST_INITIALIZING)
			sched_yield();
		return;
	}
	t.in_shim = 1;
	md_log_init();
	g_site_times = getenv("MDSHIM_RECORD") != NULL;
	md_sample_init();
	real_usable_size = find_usable_size();
	if (!g_site_times && md_sample_bytes == 0 && getenv("MDSHIM_CTL") != NULL && real_usable_size != NULL)
		md_batch_init(real_usable_size);
	opts = getenv("LIBC_DEBUG_MALLOC_OPTIONS");
	if (real_usable_size == NULL || opts == NULL || opts[0] == '\0') {
		t.in_shim = 0;
		__atomic_store_n(&g_state, ST_OFF, __ATOMIC_RELEASE);
		return;
	}
	if (!md_config_parse(opts, &g_cfg, err, sizeof(err))) {
		md_log('E', "%s: %s", program_invocation_name, err);
		md_log('E', "%s", MD_USAGE_LINE1);
		md_log('E', "%s", MD_USAGE_LINE2);
		t.in_shim = 0;
		__atomic_store_n(&g_state, ST_OFF, __ATOMIC_RELEASE);
		return;
	}
	md_ctl_init(&g_cfg);
	if (getenv("MDSHIM_CTL") != NULL) {
		/*
		 * Under mdtrace, which tracks allocations itself: pointers are
		 * verified only for the options that rewrite blocks or for
		 * verify_pointers, and without any of the shim's own options
		 * calls pass straight to glibc past the probe sites.
		 */
		if (!(g_cfg.options & (MD_FRONT_GUARD | MD_REAR_GUARD | MD_FREE_TRACK)) && !g_cfg.verify_pointers)
			g_cfg.options &= ~(uint64_t)MD_TRACK_ALLOCS;
		if (!(g_cfg.options & MD_SHIM_OPTIONS)) {
			if (g_cfg.options & MD_VERBOSE)
				md_log('I', "%s: malloc debug enabled", program_invocation_name);
			t.in_shim = 0;
			__atomic_store_n(&g_state, ST_OFF, __ATOMIC_RELEASE);
			return;
		}
	}
	g_header = (g_cfg.options & (MD_FRONT_GUARD | MD_REAR_GUARD)) != 0;
	if (g_header) {
		g_pointer_offset = HEADER_SPACE;
		if (g_cfg.options & MD_FRONT_GUARD)
			g_pointer_offset += g_cfg.front_guard_bytes;
		g_extra_bytes = g_pointer_offset;
		if (g_cfg.options & MD_REAR_GUARD)
			g_extra_bytes += g_cfg.rear_guard_bytes;
	}
	if (g_cfg.options & MD_EXPAND_ALLOC)
		g_extra_bytes += g_cfg.expand_alloc_bytes;
	if (g_cfg.options & MD_FREE_TRACK) {
		g_ft = __libc_calloc(g_cfg.free_track_allocations, sizeof(*g_ft));
		if (g_cfg.free_track_backtrace_num_frames > 0)
			g_ft_frames = __libc_calloc(g_cfg.free_track_allocations *
							    g_cfg.free_track_backtrace_num_frames,
						    sizeof(uintptr_t));
		if (g_ft == NULL)
			g_cfg.options &= ~(uint64_t)MD_FREE_TRACK;
		if (g_ft_frames == NULL)
			g_cfg.free_track_backtrace_num_frames = 0;
	}
	if (g_cfg.options & MD_VERBOSE)
		md_log('I', "%s: malloc debug enabled", program_invocation_name);
	t.in_shim = 0;
	g_fast = !g_site_times && md_sample_bytes == 0;
	__atomic_store_n(&g_state, ST_ON, __ATOMIC_RELEASE);
	/* Registered on the debug path, so anything it allocates is ours. */
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static inline bool debug_on(void)
{
	int s = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);

	if (s == ST_ON)
		return true;
	if (s == ST_OFF)
		return false;
	md_init();
	return __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == ST_ON;
}

/*
 * md_start sets the shim up when it is loaded, before the program's own
 * code runs, rather than in the program's first allocation (unless the
 * loader or a library allocates first).
 */
__attribute__((constructor)) static void md_start(void)
{
	debug_on();
}

/* ---- pointer tracking (verify_pointers) ---- */

static bool tracking(void)
{
	return (g_cfg.options & MD_TRACK_ALLOCS) && !__atomic_load_n(&g_live_lost, __ATOMIC_ACQUIRE);
}

static struct header *get_header(void *ptr)
{
	return (struct header *)((char *)ptr - g_pointer_offset);
}

/*
 * addr_check is the check word of the header of the block at ptr: bits 4
 * to 35 of the address (blocks are 16-byte aligned), so that a header
 * copied to another block's place within 64 GiB does not match.
 */
static uint32_t addr_check(const void *ptr)
{
	return (uint32_t)((uintptr_t)ptr >> 4) ^ 0x6d647368U;
}

/*
 * track_new enters a block the debug allocator hands out, or one that a
 * realloc took and gives back; returns ptr. A block with a header is live
 * by its tag.
 */
static INLINE void *track_new(void *ptr, size_t size)
{
	if (ptr == NULL)
		return NULL;
	if (g_header)
		__atomic_store_n(&get_header(ptr)->tag, DEBUG_TAG, __ATOMIC_RELEASE);
	else if (tracking() && !md_ptrtab_put(&g_live, ptr, size))
		__atomic_store_n(&g_live_lost, true, __ATOMIC_RELEASE);
	return ptr;
}

/* ---- error reports ---- */

static void log_backtrace_or_failure(const uintptr_t *frames, size_t n)
{
	if (n == 0)
		md_log('E', "  Backtrace failed to get any frames.");
	else
		md_backtrace_log(frames, n);
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
	return g_ft_frames + (size_t)(e - g_ft) * g_cfg.free_track_backtrace_num_frames;
}

/* log_error reports a bad pointer passed to free, realloc or malloc_usable_size. */
static void log_error(void *ptr, const char *what)
{
	uintptr_t frames[MD_MAX_BACKTRACE_FRAMES];
	size_t n = md_backtrace(t.fp, frames, MD_MAX_BACKTRACE_FRAMES);

	md_lock();
	md_log('E', "%s", LOG_DIVIDER);
	md_log('E', "+++ ALLOCATION %p %s", ptr, what);
	if (g_cfg.options & MD_FREE_TRACK) {
		struct freed *e = find_freed(ptr);

		if (e != NULL && e->nframes > 0) {
			md_log('E', "Backtrace of original free:");
			md_backtrace_log(freed_frames(e), e->nframes);
		}
	}
	md_log('E', "Backtrace at time of failure:");
	log_backtrace_or_failure(frames, n);
	md_log('E', "%s", LOG_DIVIDER);
	maybe_abort();
	md_unlock();
}


/* pointer_error logs a bad pointer passed to fn: kind is one of enum bad_pointer. */
enum bad_pointer { BAD_UNKNOWN, BAD_FREED, BAD_TAG };

static __attribute__((noinline, cold)) bool pointer_error(void *ptr, const char *fn, enum bad_pointer kind,
							  uint32_t tag)
{
	char what[80];

	if (kind == BAD_UNKNOWN)
		snprintf(what, sizeof(what), "UNKNOWN POINTER (%s)", fn);
	else if (kind == BAD_FREED)
		snprintf(what, sizeof(what), "USED AFTER FREE (%s)", fn);
	else
		snprintf(what, sizeof(what), "HAS INVALID TAG %x (%s)", tag, fn);
	log_error(ptr, what);
	return false;
}

/*
 * verify_pointer checks ptr before fn uses it, as Android's VerifyPointer:
 * the header tag first, then whether the block is live. With a header that
 * is the header's check word, bound to the block's address; without one,
 * the table of live blocks. With taken (free and realloc) the block stops
 * being live in the same step (its tag becomes the free tag, or it leaves
 * the table), so two threads freeing one block cannot both pass, and
 * *taken is its size; a realloc gives it back with track_new. Without
 * either, a block free_track holds is still caught as used after free. On
 * failure the error is logged and fn must not touch the block.
 */
static INLINE bool verify_pointer(void *ptr, const char *fn, uintptr_t *taken)
{
	uint32_t tag;
	bool ok;

	if (g_header) {
		struct header *h = get_header(ptr);

		tag = __atomic_load_n(&h->tag, __ATOMIC_RELAXED);
		if (__builtin_expect(tag != DEBUG_TAG, 0))
			return pointer_error(ptr, fn, tag == DEBUG_FREE_TAG ? BAD_FREED : BAD_TAG, tag);
		if (__builtin_expect(h->check != addr_check(ptr), 0))
			return pointer_error(ptr, fn, BAD_UNKNOWN, tag);
		if (taken != NULL) {
			/*
			 * Two threads freeing one block: one of them takes it.
			 * With one thread, which nothing can race, a store does
			 * (a third of what a guarded malloc/free pair costs).
			 */
			if (__libc_single_threaded)
				__atomic_store_n(&h->tag, DEBUG_FREE_TAG, __ATOMIC_RELAXED);
			else if (!__atomic_compare_exchange_n(&h->tag, &tag, DEBUG_FREE_TAG, false, __ATOMIC_ACQ_REL,
							      __ATOMIC_RELAXED))
				return pointer_error(ptr, fn, tag == DEBUG_FREE_TAG ? BAD_FREED : BAD_TAG, tag);
			*taken = h->size;
		}
		return true;
	}
	if (tracking()) {
		if (taken != NULL)
			ok = md_ptrtab_take(&g_live, ptr, taken);
		else
			ok = md_ptrtab_get(&g_live, ptr, NULL);
		return ok || pointer_error(ptr, fn, BAD_UNKNOWN, 0);
	}
	if (g_cfg.options & MD_FREE_TRACK) {
		md_lock();
		ok = find_freed(ptr) == NULL || pointer_error(ptr, fn, BAD_FREED, 0);
		md_unlock();
		return ok;
	}
	return true;
}

/* first_bad returns the index of the first byte of p[0..len) that is not v, or len. */
static size_t first_bad(const uint8_t *p, size_t len, uint8_t v)
{
	uint64_t pattern = 0x0101010101010101ULL * v, w;
	size_t i = 0;

	/* Eight bytes at a time, the common case being an intact guard. */
	for (; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, sizeof(w));
		if (w != pattern)
			break;
	}
	for (; i < len; i++)
		if (p[i] != v)
			break;
	return i;
}

/* report_guard logs a corrupted guard from its first bad byte, i. */
static __attribute__((noinline, cold)) void report_guard(void *ptr, size_t size, const char *which,
							 const uint8_t *guard, size_t len, long first_index,
							 uint8_t expected, size_t i)
{
	uintptr_t frames[MD_MAX_BACKTRACE_FRAMES];
	size_t n;

	n = md_backtrace(t.fp, frames, MD_MAX_BACKTRACE_FRAMES);
	md_lock();
	md_log('E', "%s", LOG_DIVIDER);
	md_log('E', "+++ ALLOCATION %p SIZE %zu HAS A CORRUPTED %s GUARD", ptr, size, which);
	for (; i < len; i++)
		if (guard[i] != expected)
			md_log('E', "  allocation[%d] = 0x%02x (expected 0x%02x)", (int)(first_index + (long)i),
			       guard[i], expected);
	md_log('E', "Backtrace at time of failure:");
	log_backtrace_or_failure(frames, n);
	md_log('E', "%s", LOG_DIVIDER);
	maybe_abort();
	md_unlock();
}

/* all_bytes reports whether p[0..n) are all v, quicker for the short runs of guards. */
static INLINE bool all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	md_v16 x = (md_v16){ 0 } + v, d;
	const uint8_t *e = p + n;
	uint64_t w[2];

	if (n < 16 || n > RUN_SHORT)
		return first_bad(p, n, v) == n;
	d = (*(const md_v16 *)p ^ x) | (*(const md_v16 *)(e - 16) ^ x);
	if (n > 32)
		d |= (*(const md_v16 *)(p + 16) ^ x) | (*(const md_v16 *)(e - 32) ^ x);
	if (n > 64)
		d |= (*(const md_v16 *)(p + 32) ^ x) | (*(const md_v16 *)(p + 48) ^ x) |
		     (*(const md_v16 *)(e - 64) ^ x) | (*(const md_v16 *)(e - 48) ^ x);
	memcpy(w, &d, sizeof(w));
	return (w[0] | w[1]) == 0;
}

/* check_guard checks a guard, which is almost always intact. */
static INLINE void check_guard(void *ptr, size_t size, const char *which,
							      const uint8_t *guard, size_t len,
							      long first_index, uint8_t expected)
{
	if (__builtin_expect(!all_bytes(guard, len, expected), 0))
		report_guard(ptr, size, which, guard, len, first_index, expected,
			     first_bad(guard, len, expected));
}

/* ---- free_track ---- */

static void log_free_error(const struct freed *e, const uint8_t *p, size_t bytes)
{
	md_log('E', "%s", LOG_DIVIDER);
	md_log('E', "+++ ALLOCATION %p USED AFTER FREE", e->ptr);
	for (size_t i = 0; i < bytes; i++)
		if (p[i] != MD_FILL_FREE_VALUE)
			md_log('E', "  allocation[%zu] = 0x%02x (expected 0x%02x)", i, p[i],
			       MD_FILL_FREE_VALUE);
	if (e->nframes > 0) {
		md_log('E', "Backtrace at time of free:");
		md_backtrace_log(freed_frames(e), e->nframes);
	}
	md_log('E', "%s", LOG_DIVIDER);
	maybe_abort();
}

/* verify_freed checks that a block kept by free_track still holds the free fill. Lock held. */
static void verify_freed(const struct freed *e)
{
	const uint8_t *p = e->ptr;
	size_t bytes;

	if (g_header) {
		struct header *h = get_header(e->ptr);

		if (h->tag != DEBUG_FREE_TAG) {
			md_log('E', "%s", LOG_DIVIDER);
			md_log('E', "+++ ALLOCATION 0x%lx HAS CORRUPTED HEADER TAG 0x%x AFTER FREE",
			       (unsigned long)(uintptr_t)e->ptr, h->tag);
			md_log('E', "%s", LOG_DIVIDER);
			maybe_abort();
			return;
		}
		bytes = h->usable_size;
	} else {
		bytes = real_usable_size(e->ptr);
	}
	bytes = min_size(bytes, g_cfg.fill_on_free_bytes);
	/* One report for the block, however many bytes differ. */
	if (first_bad(p, bytes, MD_FILL_FREE_VALUE) != bytes)
		log_free_error(e, p, bytes);
}

/* free_track_add keeps a freed block; returns the block to really free, if any. */
static void *free_track_add(void *ptr, void *orig, const uintptr_t *frames, size_t nframes)
{
	size_t cap = g_cfg.free_track_allocations, slot;
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
		memcpy(g_ft_frames + (size_t)(e - g_ft) * g_cfg.free_track_backtrace_num_frames, frames,
		       nframes * sizeof(uintptr_t));
	g_ft_count++;
	md_unlock();
	return evicted;
}

__attribute__((destructor)) static void md_fini(void)
{
	if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) != ST_ON || !(g_cfg.options & MD_FREE_TRACK))
		return;
	t.in_shim = 1;
	md_lock();
	g_finalized = true;
	for (size_t i = 0; i < g_ft_count; i++)
		verify_freed(&g_ft[(g_ft_head + i) % g_cfg.free_track_allocations]);
	md_unlock();
	t.in_shim = 0;
}

/* ---- the debug allocator ---- */

static INLINE size_t internal_usable_size(void *ptr)
{
	if (g_header)
		return get_header(ptr)->usable_size;
	return real_usable_size(ptr);
}

/*
 * header_alloc allocates a block that takes a header: glibc's malloc
 * already aligns as the header needs, without memalign's extra steps.
 */
static INLINE void *header_alloc(size_t n)
{
	if (MD_MIN_ALIGN <= _Alignof(max_align_t))
		return __libc_malloc(n);
	return __libc_memalign(MD_MIN_ALIGN, n);
}

static INLINE void *init_header(struct header *h, void *orig, size_t size)
{
	uint8_t *user = (uint8_t *)h + g_pointer_offset;

	if (g_cfg.options & MD_REAR_GUARD) {
		/* The block ends where the rear guard starts. */
		h->usable_size = size;
		fill_bytes(user + size, MD_REAR_GUARD_VALUE, g_cfg.rear_guard_bytes);
	} else {
		size_t usable = real_usable_size(orig);

		if (usable == 0) {
			__libc_free(orig);
			return NULL;
		}
		h->usable_size = usable - (g_pointer_offset + (size_t)((char *)h - (char *)orig));
	}
	h->tag = DEBUG_TAG;
	h->orig_pointer = orig;
	h->size = size;
	h->check = addr_check(user);
	if (g_cfg.options & MD_FRONT_GUARD)
		fill_bytes((uint8_t *)h + HEADER_SPACE, MD_FRONT_GUARD_VALUE, g_cfg.front_guard_bytes);
	return user;
}

static INLINE void fill_alloc(void *ptr, size_t from)
{
	size_t bytes = min_size(internal_usable_size(ptr), g_cfg.fill_on_alloc_bytes);

	if (bytes > from)
		fill_bytes((uint8_t *)ptr + from, MD_FILL_ALLOC_VALUE, bytes - from);
}

/* alloc_block is malloc without the tracking, which realloc does itself. */
static INLINE void *alloc_block(size_t size)
{
	size_t real_size;
	void *ptr;

	if (size == 0)
		size = 1;
	real_size = size + g_extra_bytes;
	if (real_size < size || size > MAX_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	if (g_header) {
		void *orig = header_alloc(real_size);

		if (orig == NULL)
			return NULL;
		ptr = init_header(orig, orig, size);
	} else {
		ptr = __libc_malloc(real_size);
	}
	if (ptr != NULL && (g_cfg.options & MD_FILL_ON_ALLOC))
		fill_alloc(ptr, 0);
	return ptr;
}

static INLINE void *internal_malloc(size_t size)
{
	return track_new(alloc_block(size), size);
}

static bool backtrace_size_ok(size_t size)
{
	if (!(g_cfg.options & MD_BACKTRACE_SPECIFIC_SIZES))
		return true;
	return size >= g_cfg.backtrace_min_size_bytes && size <= g_cfg.backtrace_max_size_bytes;
}

/*
 * free_track keeps a freed block of bytes usable bytes with the backtrace of
 * its free; returns the block to really free, if any. Out of line, so that
 * free's own frame stays small.
 */
static __attribute__((noinline)) void *free_track(void *ptr, void *orig, size_t bytes)
{
	uintptr_t frames[MD_MAX_BACKTRACE_FRAMES];
	size_t n = 0;

	if (g_cfg.free_track_backtrace_num_frames > 0 && backtrace_size_ok(bytes))
		n = md_backtrace(t.fp, frames, g_cfg.free_track_backtrace_num_frames);
	return free_track_add(ptr, orig, frames, n);
}

/*
 * internal_free frees a block verify_pointer has taken: with a header, its
 * tag is the free tag already.
 */
static INLINE void internal_free(void *ptr)
{
	void *orig = ptr;
	size_t bytes = 0;

	if (g_header) {
		struct header *h = get_header(ptr);

		if (g_cfg.options & MD_FRONT_GUARD)
			check_guard(ptr, h->size, "FRONT", (uint8_t *)h + HEADER_SPACE,
				    g_cfg.front_guard_bytes, -(long)g_cfg.front_guard_bytes,
				    MD_FRONT_GUARD_VALUE);
		if (g_cfg.options & MD_REAR_GUARD)
			check_guard(ptr, h->size, "REAR", (uint8_t *)ptr + h->size,
				    g_cfg.rear_guard_bytes, (long)h->size, MD_REAR_GUARD_VALUE);
		orig = h->orig_pointer;
		bytes = h->usable_size;
	} else if (g_cfg.options & (MD_FILL_ON_FREE | MD_FREE_TRACK)) {
		bytes = real_usable_size(ptr);
	}
	if (g_cfg.options & MD_FILL_ON_FREE)
		fill_bytes(ptr, MD_FILL_FREE_VALUE, min_size(bytes, g_cfg.fill_on_free_bytes));
	if (g_cfg.options & MD_FREE_TRACK) {
		orig = free_track(ptr, orig, bytes);
		if (orig == NULL)
			return;
	}
	__libc_free(orig);
}

static INLINE void debug_free(void *ptr)
{
	uintptr_t size;

	if (ptr == NULL)
		return;
	if (!verify_pointer(ptr, "free", &size))
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
	real_size = size + g_extra_bytes;
	if (real_size < size || real_size > MAX_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	if (g_header) {
		void *orig = header_alloc(real_size);

		if (orig == NULL)
			return NULL;
		memset(orig, 0, real_usable_size(orig));
		ptr = init_header(orig, orig, size);
	} else {
		ptr = __libc_calloc(1, real_size);
	}
	return track_new(ptr, size);
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
	if (g_header) {
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
		real_size = alignment + bytes + g_extra_bytes;
		if (real_size < bytes) {
			errno = ENOMEM;
			return NULL;
		}
		orig = __libc_malloc(real_size);
		if (orig == NULL)
			return NULL;
		value = (uintptr_t)orig + g_pointer_offset;
		value += (-value) % alignment;
		ptr = init_header((struct header *)(value - g_pointer_offset), orig, bytes);
	} else {
		size_t real_size = bytes + g_extra_bytes;

		if (real_size < bytes) {
			errno = ENOMEM;
			return NULL;
		}
		ptr = __libc_memalign(alignment, real_size);
	}
	if (ptr != NULL && (g_cfg.options & MD_FILL_ON_ALLOC))
		fill_alloc(ptr, 0);
	return track_new(ptr, bytes);
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
	if (g_cfg.options & MD_EXPAND_ALLOC) {
		real_size += g_cfg.expand_alloc_bytes;
		if (real_size < bytes) {
			errno = ENOMEM;
			return NULL;
		}
	}
	if (bytes > MAX_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	if (g_header) {
		struct header *h = get_header(ptr);

		if (real_size == h->size)
			return ptr;
		if (real_size < h->usable_size) {
			h->size = real_size;
			if (g_cfg.options & MD_REAR_GUARD) {
				h->usable_size = real_size;
				memset((uint8_t *)ptr + real_size, MD_REAR_GUARD_VALUE,
				       g_cfg.rear_guard_bytes);
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
		prev_size = min_size(h->usable_size, internal_usable_size(new_ptr));
		memcpy(new_ptr, ptr, prev_size);
		internal_free(ptr);
	} else {
		prev_size = real_usable_size(ptr);
		new_ptr = __libc_realloc(ptr, real_size);
		if (new_ptr == NULL)
			return NULL;
	}
	if (g_cfg.options & MD_FILL_ON_ALLOC)
		fill_alloc(new_ptr, prev_size);
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
	if (!verify_pointer(ptr, "realloc", &old_size))
		return NULL;
	new_ptr = realloc_block(ptr, bytes);
	if (new_ptr != NULL)
		return track_new(new_ptr, bytes);
	if (bytes != 0)
		track_new(ptr, old_size);
	return NULL;
}

static size_t debug_malloc_usable_size(void *ptr)
{
	if (ptr == NULL)
		return 0;
	if (!verify_pointer(ptr, "malloc_usable_size", NULL))
		return 0;
	return internal_usable_size(ptr);
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
#define ENTER()                                   \
	do {                                      \
		t.in_shim = 1;                    \
		t.fp = __builtin_frame_address(0); \
	} while (0)
#define LEAVE() (t.in_shim = 0)

/*
 * A site mdtrace probes no longer starts with its 5-byte NOP (0f 1f 44 00
 * 00): the kernel puts a breakpoint or a call there. The hooks look at
 * that first byte, in their process's own copy of the page, and call a
 * site only while it is probed: a call that nobody watches costs about a
 * nanosecond, a fifth of what the shim's hooks cost beyond glibc.
 */
#define SITE_PROBED(site) md_site_probed((const void *)(uintptr_t)(site))
#define SITE_ALLOC(...)                                    \
	do {                                               \
		if (SITE_PROBED(mdshim_site_alloc))        \
			mdshim_site_alloc(__VA_ARGS__);    \
	} while (0)
#define SITE_FREE(...)                                     \
	do {                                               \
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

	if (!g_site_times)
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
	return r != NULL && md_sample_alloc(size) && md_sample_mark(r);
}

/* site_old reports whether the free of a block goes to the probe sites. */
static inline bool site_old(void *ptr)
{
	return ptr != NULL && (md_sample_bytes == 0 || md_sample_take(ptr));
}

/* site_free_done reports the end of a free while mdtrace records calls. */
static inline void site_free_done(void *ptr, uint64_t start)
{
	if (g_site_times && ptr != NULL)
		SITE_ALLOC(NULL, MD_CALL_FREE, (uintptr_t)ptr, 0, start);
}

/* fast_path reports whether a hook may take the shortest path (g_fast). */
static INLINE bool fast_path(void)
{
	return __builtin_expect(__atomic_load_n(&g_fast, __ATOMIC_ACQUIRE) &&
					!__atomic_load_n(&md_ctl_pending, __ATOMIC_RELAXED),
				1);
}

void *malloc(size_t size)
{
	uint64_t start;
	void *r;

	if (t.in_shim)
		return __libc_malloc(size);
	if (fast_path()) {
		ENTER();
		r = internal_malloc(size);
		LEAVE();
		SITE_ALLOC(r, MD_CALL_MALLOC, size, 0, 0);
		return r;
	}
	md_ctl_poll();
	if (debug_on()) {
		start = site_start();
		ENTER();
		r = internal_malloc(size);
		LEAVE();
	} else {
		start = site_start();
		r = __libc_malloc(size);
		if (BATCHED(r, size))
			return r;
	}
	if (site_new(r, size))
		SITE_ALLOC(r, MD_CALL_MALLOC, size, 0, start);
	return r;
}

void free(void *ptr)
{
	uint64_t start;
	bool on;

	if (t.in_shim) {
		__libc_free(ptr);
		return;
	}
	if (fast_path()) {
		if (ptr == NULL)
			return;
		SITE_FREE(ptr, MD_CALL_FREE);
		ENTER();
		debug_free(ptr);
		LEAVE();
		return;
	}
	md_ctl_poll();
	on = debug_on();
	if (!on && md_batch_on && ptr != NULL && md_batch_free(__builtin_frame_address(0), ptr))
		return;
	start = site_start();
	if (site_old(ptr))
		SITE_FREE(ptr, MD_CALL_FREE);
	if (on) {
		ENTER();
		debug_free(ptr);
		LEAVE();
	} else {
		__libc_free(ptr);
	}
	site_free_done(ptr, start);
}

void *calloc(size_t nmemb, size_t size)
{
	uint64_t start;
	void *r;

	if (t.in_shim)
		return __libc_calloc(nmemb, size);
	if (debug_on()) {
		start = site_start();
		ENTER();
		r = debug_calloc(nmemb, size);
		LEAVE();
	} else {
		start = site_start();
		r = __libc_calloc(nmemb, size);
		if (BATCHED(r, nmemb * size))
			return r;
	}
	if (site_new(r, nmemb * size))
		SITE_ALLOC(r, MD_CALL_CALLOC, nmemb, size, start);
	return r;
}

/* do_realloc is realloc and reallocarray after the size is known. */
static INLINE void *do_realloc(void *ptr, size_t size)
{
	bool on = debug_on(), old_site, new_site;
	uint64_t start = site_start();
	void *r;

	/* A realloc goes to the unbatched sites, after the thread's batch. */
	if (md_batch_on)
		md_batch_sync();

	/*
	 * Sampling decides on the new block before the call. The old block,
	 * if it goes to the sites, leaves the table as a realloc's, so that
	 * it comes back if the realloc fails, whatever the new decision.
	 */
	old_site = site_old(ptr);
	new_site = md_sample_bytes == 0 || (size != 0 && md_sample_alloc(size));
	if (old_site)
		SITE_FREE(ptr, MD_CALL_REALLOC);
	if (on) {
		ENTER();
		r = debug_realloc(ptr, size);
		LEAVE();
	} else {
		r = __libc_realloc(ptr, size);
	}
	if (md_sample_bytes == 0) {
		SITE_ALLOC(r, MD_CALL_REALLOC, (uintptr_t)ptr, size, start);
		return r;
	}
	if (r == NULL && size != 0) {
		/* Failed: the old block stays as it was, sampled or not. */
		if (old_site && md_sample_mark(ptr))
			SITE_ALLOC(NULL, MD_CALL_REALLOC, (uintptr_t)ptr, size, start);
		return r;
	}
	/* Else the old block is gone (its saved entry is never restored). */
	if (!new_site || r == NULL || !md_sample_mark(r))
		return r;
	if (old_site)
		SITE_ALLOC(r, MD_CALL_REALLOC, (uintptr_t)ptr, size, start);
	else
		SITE_ALLOC(r, MD_CALL_MALLOC, size, 0, start);
	return r;
}

void *realloc(void *ptr, size_t size)
{
	if (t.in_shim)
		return __libc_realloc(ptr, size);
	return do_realloc(ptr, size);
}

void *reallocarray(void *ptr, size_t nmemb, size_t size)
{
	size_t total;

	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	if (t.in_shim)
		return __libc_realloc(ptr, total);
	return do_realloc(ptr, total);
}

/* do_memalign is the memalign family once the arguments are checked. */
static INLINE void *do_memalign(size_t alignment, size_t size)
{
	uint64_t start;
	void *r;

	if (debug_on()) {
		start = site_start();
		ENTER();
		r = debug_memalign(alignment, size);
		LEAVE();
	} else {
		start = site_start();
		r = __libc_memalign(alignment, size);
		if (BATCHED(r, size))
			return r;
	}
	if (site_new(r, size))
		SITE_ALLOC(r, MD_CALL_MEMALIGN, alignment, size, start);
	return r;
}

void *memalign(size_t alignment, size_t size)
{
	if (t.in_shim)
		return __libc_memalign(alignment, size);
	return do_memalign(alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size)
{
	if (t.in_shim)
		return __libc_memalign(alignment, size);
	if (debug_on() && (alignment == 0 || !powerof2(alignment) || size % alignment != 0)) {
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
	if (t.in_shim)
		r = __libc_memalign(alignment, size);
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

	if (t.in_shim)
		return __libc_memalign(page, size);
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
	if (t.in_shim)
		return __libc_memalign(page, rounded);
	return do_memalign(page, rounded);
}

size_t malloc_usable_size(void *ptr)
{
	size_t r;

	if (t.in_shim || !debug_on())
		return real_usable_size != NULL ? real_usable_size(ptr) : 0;
	ENTER();
	r = debug_malloc_usable_size(ptr);
	LEAVE();
	return r;
}

/* mdshim_version names the library's interface version, for mdtrace. */
__attribute__((visibility("default"))) const char *mdshim_version(void)
{
	return "mdshim 2";
}
