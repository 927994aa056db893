// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The real allocator: glibc's __libc_* entry points, which the shim gets
 * its memory from, so that no dlsym is needed to reach it.
 */
#ifndef MD_REAL_H
#define MD_REAL_H

#include <stddef.h>

extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);

#endif
