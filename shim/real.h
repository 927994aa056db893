// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The real allocator: the __libc_* entry points of the library that
 * serves the shim's memory (glibc's, or a preloaded allocator's that
 * defines them too), which the shim gets its blocks from.
 *
 * The shim defines __libc_malloc and the others itself (mdshim.c), so
 * that a program calling them directly goes through the shim: its own
 * calls cannot bind to those names. real.c finds the next definitions in
 * the loader's list of objects, without calling anything, the first time
 * one is needed. The shim's tests link the hooks into their program, with
 * MD_STATIC_REAL: there the names bind at link time, as before.
 */
#ifndef MD_REAL_H
#define MD_REAL_H

#include <stddef.h>

#ifdef MD_STATIC_REAL
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t nmemb, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
#define md_real_malloc __libc_malloc
#define md_real_free __libc_free
#define md_real_calloc __libc_calloc
#define md_real_realloc __libc_realloc
#define md_real_memalign __libc_memalign
#define md_real_dlsym dlsym
static inline void md_real_resolve(void)
{
}
#else
extern void *(*md_real_malloc)(size_t size) __attribute__((visibility("hidden")));
extern void (*md_real_free)(void *ptr) __attribute__((visibility("hidden")));
extern void *(*md_real_calloc)(size_t nmemb, size_t size) __attribute__((visibility("hidden")));
extern void *(*md_real_realloc)(void *ptr, size_t size) __attribute__((visibility("hidden")));
extern void *(*md_real_memalign)(size_t alignment, size_t size) __attribute__((visibility("hidden")));

/*
 * md_real_resolve finds the real allocator's entry points, and those the
 * dlsym of a program must not hand out (dlsym.c), once; a failure is
 * fatal, said on stderr.
 */
void md_real_resolve(void) __attribute__((visibility("hidden")));

/*
 * md_real_dlsym and md_real_dlvsym are the loader's dlsym and dlvsym, which
 * the shim's own replace (dlsym.c); md_real_entry returns the shim's own
 * entry point for a function of the real allocator's library, which dlsym
 * returns in its place, or NULL.
 */
extern void *(*md_real_dlsym)(void *handle, const char *name) __attribute__((visibility("hidden")));
extern void *(*md_real_dlvsym)(void *handle, const char *name, const char *version)
	__attribute__((visibility("hidden")));
void *md_real_entry(void *addr) __attribute__((visibility("hidden")));

/* The C library's siglongjmp (longjmp, _longjmp) and __longjmp_chk, which jump.c's call. */
extern void (*md_real_siglongjmp)(void *env, int val) __attribute__((visibility("hidden")));
extern void (*md_real_longjmp_chk)(void *env, int val) __attribute__((visibility("hidden")));
#endif

#endif
