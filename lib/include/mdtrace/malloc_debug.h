/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Android's malloc debug API, as Android's malloc debug documentation
 * (README_api.md) declares it: a program asks for its own live
 * allocations and their backtraces.
 *
 * Link with libmdtrace (pkg-config --cflags --libs mdtrace). Under mdtrace,
 * in a command it launches with its shim preloaded and the backtrace
 * option on, get_malloc_leak_info answers from mdtrace's table of live
 * allocations. Anywhere else (run natively, attached to with -p, or
 * launched with --no-preload) nothing tracks the allocations, and the
 * result is empty, as on Android without malloc debug: *info NULL and the
 * sizes 0.
 *
 * The buffer holds *overall_size / *info_size entries, each:
 *
 *   size_t    size_of_original_allocation
 *   size_t    num_allocations       (blocks of that size and backtrace)
 *   uintptr_t pc[*backtrace_size]   (zero past the end of a backtrace)
 *
 * *total_memory is the sum of the sizes of the live allocations.
 */
#ifndef MDTRACE_MALLOC_DEBUG_H
#define MDTRACE_MALLOC_DEBUG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * get_malloc_leak_info sets *info to a buffer of the live allocations,
 * grouped by size and backtrace, to be released with
 * free_malloc_leak_info. With a NULL argument it changes nothing.
 */
void get_malloc_leak_info(uint8_t **info, size_t *overall_size, size_t *info_size,
			  size_t *total_memory, size_t *backtrace_size);

/* free_malloc_leak_info releases the buffer of get_malloc_leak_info (NULL is allowed). */
void free_malloc_leak_info(uint8_t *info);

#ifdef __cplusplus
}
#endif

#endif /* MDTRACE_MALLOC_DEBUG_H */
