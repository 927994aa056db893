// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * libmdtrace: get_malloc_leak_info and free_malloc_leak_info for programs
 * that link them (include/mdtrace/malloc_debug.h), with and without
 * mdtrace.
 *
 * Under mdtrace, the shim preloaded into the command implements both calls
 * (shim/ctl.c): it asks mdtrace for the live allocations. A program linked
 * with libmdtrace.so binds its calls to the shim's definitions anyway, the
 * preloaded library coming first; one linked with libmdtrace.a has its own
 * definitions, which come before the shim's. So these look the shim up by
 * the other names it exports the calls by (SYM_GET_LEAK_INFO,
 * SYM_FREE_LEAK_INFO) and hand the call over. Without the shim nothing
 * tracks the allocations: the result is empty, as on Android without
 * malloc debug.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

#include "../abi/mdtrace_abi.h"
#include "mdtrace/malloc_debug.h"

#define EXPORT __attribute__((visibility("default")))

typedef void get_fn(uint8_t **info, size_t *overall_size, size_t *info_size, size_t *total_memory,
		    size_t *backtrace_size);
typedef void free_fn(uint8_t *info);

/* shim_symbol returns the shim's definition of name, or NULL without the shim; it keeps errno. */
static void *shim_symbol(const char *name)
{
	int saved_errno = errno;
	void *sym = dlsym(RTLD_DEFAULT, name);

	errno = saved_errno;
	return sym;
}

EXPORT void get_malloc_leak_info(uint8_t **info, size_t *overall_size, size_t *info_size,
				 size_t *total_memory, size_t *backtrace_size)
{
	get_fn *get = (get_fn *)shim_symbol(SYM_GET_LEAK_INFO);

	if (get != NULL) {
		get(info, overall_size, info_size, total_memory, backtrace_size);
		return;
	}
	if (info == NULL || overall_size == NULL || info_size == NULL || total_memory == NULL ||
	    backtrace_size == NULL)
		return;
	*info = NULL;
	*overall_size = 0;
	*info_size = 0;
	*total_memory = 0;
	*backtrace_size = 0;
}

EXPORT void free_malloc_leak_info(uint8_t *info)
{
	free_fn *release = (free_fn *)shim_symbol(SYM_FREE_LEAK_INFO);

	if (release != NULL) {
		release(info);
		return;
	}
	/* Without the shim get_malloc_leak_info gave NULL; free is what Android does with the buffer. */
	free(info);
}
