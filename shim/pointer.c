// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * verify_pointers: the table of live blocks and the reports of bad
 * pointers (pointer.h has the checks of the hot paths).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backtrace.h"
#include "config.h"
#include "debug.h"
#include "free_track.h"
#include "log.h"
#include "pointer.h"
#include "ptrtab.h"

struct md_ptrtab md_live = MD_PTRTAB_INITIALIZER;
bool md_live_lost;

void md_pointer_fork_prepare(void)
{
	md_ptrtab_fork_prepare(&md_live);
}

void md_pointer_fork_parent(void)
{
	md_ptrtab_fork_parent(&md_live);
}

void md_pointer_fork_child(void)
{
	md_ptrtab_fork_child(&md_live);
}

/* log_error reports a bad pointer passed to free, realloc or malloc_usable_size. */
static void log_error(void *ptr, const char *what)
{
	uintptr_t frames[MD_MAX_BACKTRACE_FRAMES];
	size_t n = md_backtrace(md_tls.fp, frames, MD_MAX_BACKTRACE_FRAMES);

	md_lock();
	md_log('E', "%s", MD_LOG_DIVIDER);
	md_log('E', "+++ ALLOCATION %p %s", ptr, what);
	if (md_cfg.options & MD_FREE_TRACK)
		md_free_track_log_free(ptr);
	md_log('E', "Backtrace at time of failure:");
	md_backtrace_log_or_failure(frames, n);
	md_log('E', "%s", MD_LOG_DIVIDER);
	md_maybe_abort();
	md_unlock();
}

bool md_pointer_error(void *ptr, const char *fn, enum md_bad_pointer kind, uint32_t tag)
{
	char what[80];

	if (kind == MD_BAD_UNKNOWN)
		snprintf(what, sizeof(what), "UNKNOWN POINTER (%s)", fn);
	else if (kind == MD_BAD_FREED)
		snprintf(what, sizeof(what), "USED AFTER FREE (%s)", fn);
	else
		snprintf(what, sizeof(what), "HAS INVALID TAG %x (%s)", tag, fn);
	log_error(ptr, what);
	return false;
}

bool md_verify_not_freed(void *ptr, const char *fn)
{
	bool ok;

	md_lock();
	ok = !md_free_track_holds(ptr) || md_pointer_error(ptr, fn, MD_BAD_FREED, 0);
	md_unlock();
	return ok;
}

/*
 * read_own copies len bytes at addr into buf through the kernel, which
 * answers EFAULT for memory that is not mapped readable instead of a
 * SIGSEGV; false if it could not copy them all.
 */
static bool read_own(const void *addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };

	return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len;
}

bool md_pointer_unknown(void *ptr, const char *fn)
{
	struct md_header h;

	if ((uintptr_t)ptr >= md_pointer_offset && read_own(md_get_header(ptr), &h, sizeof(h)) &&
	    h.tag == MD_DEBUG_FREE_TAG && h.check == md_addr_check(ptr))
		return md_pointer_error(ptr, fn, MD_BAD_FREED, h.tag);
	return md_pointer_error(ptr, fn, MD_BAD_UNKNOWN, 0);
}
