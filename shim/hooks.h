/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The shim's own entry points of the allocator's functions (mdshim.c), by
 * their hidden names: what the search for the real allocator passes over
 * (real.c) and what a library loaded into a running process routes the
 * program's calls to (inject.c).
 */
#ifndef MD_HOOKS_H
#define MD_HOOKS_H

#include <stddef.h>

extern void *md_hook_malloc(size_t) __attribute__((visibility("hidden")));
extern void md_hook_free(void *) __attribute__((visibility("hidden")));
extern void *md_hook_calloc(size_t, size_t) __attribute__((visibility("hidden")));
extern void *md_hook_realloc(void *, size_t) __attribute__((visibility("hidden")));
extern void *md_hook_reallocarray(void *, size_t, size_t) __attribute__((visibility("hidden")));
extern void *md_hook_memalign(size_t, size_t) __attribute__((visibility("hidden")));
extern void *md_hook_aligned_alloc(size_t, size_t) __attribute__((visibility("hidden")));
extern int md_hook_posix_memalign(void **, size_t, size_t) __attribute__((visibility("hidden")));
extern void *md_hook_valloc(size_t) __attribute__((visibility("hidden")));
extern void *md_hook_pvalloc(size_t) __attribute__((visibility("hidden")));
extern size_t md_hook_malloc_usable_size(void *) __attribute__((visibility("hidden")));

#endif /* MD_HOOKS_H */
