// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The debug allocator's state and its setup (debug.h): the options read
 * from LIBC_DEBUG_MALLOC_OPTIONS, the block layout they give, the one lock
 * and the fork handlers that keep it and the tables whole in a child.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "../abi/mdtrace_abi.h"
#include "batch.h"
#include "config.h"
#include "ctl.h"
#include "debug.h"
#include "free_track.h"
#include "guard.h"
#include "log.h"
#include "pointer.h"
#include "real.h"
#include "sample.h"

int md_state = MD_ST_UNINIT;
struct md_config md_cfg;
bool md_header;
size_t md_pointer_offset;
size_t md_extra_bytes;
size_t (*md_real_usable_size)(void *);
bool md_site_times;
bool md_fast;
__thread struct md_tls md_tls __attribute__((tls_model("initial-exec")));

pthread_mutex_t md_lock_mutex = PTHREAD_MUTEX_INITIALIZER;

void md_internal_begin(void)
{
	if (md_tls.in_shim++ == 0)
		md_tls.top = __builtin_frame_address(0);
}

void md_internal_end(void)
{
	md_tls.in_shim--;
}

/*
 * md_left_by_jump is called by the program's longjmp (jump.c) before it
 * jumps to a frame at sp. A jump out of the library (a signal handler's,
 * whose signal came while the library ran) would leave in_shim set, and
 * every later call of the thread would pass through unchecked, and the
 * one lock held if the thread held it: both are let go. A jump that stays
 * below the frame that set in_shim (within a handler) leaves them.
 */
void md_left_by_jump(uintptr_t sp)
{
	if (md_tls.in_shim == 0 || sp <= (uintptr_t)md_tls.top)
		return;
	if (md_tls.lock_depth > 0)
		pthread_mutex_unlock(&md_lock_mutex);
	md_tls.lock_depth = 0;
	md_tls.in_shim = 0;
}

/* Lock order: md_lock_mutex before any table shard; a table call takes nothing else. */
static void fork_prepare(void)
{
	md_lock();
	md_free_track_fork_prepare();
	md_pointer_fork_prepare();
}

static void fork_parent(void)
{
	md_pointer_fork_parent();
	md_free_track_fork_parent();
	md_unlock();
}

static void fork_child(void)
{
	md_pointer_fork_child();
	md_free_track_fork_child();
	pthread_mutex_init(&md_lock_mutex, NULL);
	md_tls.lock_depth = 0;
}

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

	if (dladdr((void *)md_real_malloc, &info) != 0 && info.dli_fname != NULL) {
		h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
		if (h != NULL) {
			f = md_real_dlsym(h, "malloc_usable_size");
			dlclose(h);
		}
	}
	if (f == NULL)
		f = dlsym(RTLD_NEXT, "malloc_usable_size");
	return (size_t(*)(void *))f;
}

/*
 * say_unapplied says, without mdtrace, which options the shim alone does
 * not apply: mdtrace tracks the allocations that backtraces, leak reports
 * and records need. Silence would read as a program without leaks.
 */
static void say_unapplied(void)
{
	static const struct {
		uint64_t bit;
		const char *name;
	} needs[] = {
		{ MD_BACKTRACE, "backtrace" },
		{ MD_LEAK_TRACK, "leak_track" },
		{ MD_RECORD_ALLOCS, "record_allocs" },
		{ MD_CHECK_UNREACHABLE_ON_SIGNAL, "check_unreachable_on_signal" },
	};
	char list[128] = "";
	size_t len = 0;

	for (size_t i = 0; i < sizeof(needs) / sizeof(needs[0]); i++) {
		if (!(md_cfg.options & needs[i].bit))
			continue;
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", len > 0 ? " " : "", needs[i].name);
		if (len >= sizeof(list))
			break;
	}
	if (len > 0)
		md_log('E', "%s: malloc debug: %s not applied: the preloaded library alone does not track allocations (run the program under mdtrace)",
		       program_invocation_name, list);
}

void md_init(void)
{
	int expected = MD_ST_UNINIT;
	char err[MD_ERR_MAX];
	const char *opts;

	if (!__atomic_compare_exchange_n(&md_state, &expected, MD_ST_INITIALIZING, false, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		while (__atomic_load_n(&md_state, __ATOMIC_ACQUIRE) == MD_ST_INITIALIZING)
			sched_yield();
		return;
	}
	md_shim_begin(__builtin_frame_address(0));
	md_real_resolve();
	md_log_init();
	md_site_times = getenv(ENV_RECORD) != NULL;
	md_sample_init();
	md_real_usable_size = find_usable_size();
	if (!md_site_times && md_sample_bytes == 0 && getenv(ENV_CTL) != NULL && md_real_usable_size != NULL)
		md_batch_init(md_real_usable_size);
	opts = getenv(ENV_OPTIONS);
	if (md_real_usable_size == NULL || opts == NULL || opts[0] == '\0') {
		md_tls.in_shim = 0;
		__atomic_store_n(&md_state, MD_ST_OFF, __ATOMIC_RELEASE);
		return;
	}
	if (!md_config_parse(opts, &md_cfg, err, sizeof(err))) {
		md_log('E', "%s: %s", program_invocation_name, err);
		md_log('E', "%s", MD_USAGE_LINE1);
		md_log('E', "%s", MD_USAGE_LINE2);
		md_tls.in_shim = 0;
		__atomic_store_n(&md_state, MD_ST_OFF, __ATOMIC_RELEASE);
		return;
	}
	md_ctl_init(&md_cfg);
	if (getenv(ENV_CTL) == NULL)
		say_unapplied();
	if (getenv(ENV_CTL) != NULL) {
		/*
		 * Under mdtrace, which tracks allocations itself: pointers are
		 * verified only for the options that rewrite blocks or for
		 * verify_pointers, and without any of the shim's own options
		 * calls pass straight to glibc past the probe sites.
		 */
		if (!(md_cfg.options & (MD_FRONT_GUARD | MD_REAR_GUARD | MD_FREE_TRACK)) && !md_cfg.verify_pointers)
			md_cfg.options &= ~(uint64_t)MD_TRACK_ALLOCS;
		if (!(md_cfg.options & MD_SHIM_OPTIONS)) {
			if (md_cfg.options & MD_VERBOSE)
				md_log('I', "%s: malloc debug enabled", program_invocation_name);
			md_tls.in_shim = 0;
			__atomic_store_n(&md_state, MD_ST_OFF, __ATOMIC_RELEASE);
			return;
		}
	}
	md_header = (md_cfg.options & (MD_FRONT_GUARD | MD_REAR_GUARD)) != 0;
	if (md_header) {
		md_pointer_offset = MD_HEADER_SPACE;
		if (md_cfg.options & MD_FRONT_GUARD)
			md_pointer_offset += md_cfg.front_guard_bytes;
		md_extra_bytes = md_pointer_offset;
		if (md_cfg.options & MD_REAR_GUARD)
			md_extra_bytes += md_cfg.rear_guard_bytes;
	}
	if (md_cfg.options & MD_EXPAND_ALLOC)
		md_extra_bytes += md_cfg.expand_alloc_bytes;
	if (md_cfg.options & MD_FREE_TRACK)
		md_free_track_init();
	if (md_cfg.options & MD_VERBOSE)
		md_log('I', "%s: malloc debug enabled", program_invocation_name);
	md_tls.in_shim = 0;
	md_fast = !md_site_times && md_sample_bytes == 0;
	__atomic_store_n(&md_state, MD_ST_ON, __ATOMIC_RELEASE);
	/* Registered on the debug path, so anything it allocates is ours. */
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/*
 * md_start sets the shim up when it is loaded, before the program's own
 * code runs, rather than in the program's first allocation (unless the
 * loader or a library allocates first).
 */
__attribute__((constructor)) static void md_start(void)
{
	md_debug_on();
}
