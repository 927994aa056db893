// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * dlsym and dlvsym: a program that looks the allocator's functions up in
 * its library (ctypes.CDLL("libc.so.6").malloc, dlsym(libc, "malloc"))
 * would call them past the shim, and mdtrace would see none of its blocks.
 * The shim's dlsym gives the shim's own entry point for each of them
 * (real.c), and every other answer unchanged, dlerror's included.
 *
 * The loader finds RTLD_NEXT's object from its caller's return address:
 * the entry points jump to the loader's function for it, keeping the
 * caller's, rather than call it (what comes after the caller is never the
 * allocator's library that the shim replaces, in a program the shim is
 * given). Every other handle is looked up from here, in the shim's
 * namespace, the program's.
 */
#ifndef MD_STATIC_REAL
#define _GNU_SOURCE
#include <stddef.h>

#include "real.h"

void *md_dlsym(void *handle, const char *name) __attribute__((visibility("hidden"), used));
void *md_dlvsym(void *handle, const char *name, const char *version) __attribute__((visibility("hidden"), used));

void *md_dlsym(void *handle, const char *name)
{
	void *r = md_real_dlsym(handle, name), *shim = md_real_entry(r);

	return shim != NULL ? shim : r;
}

void *md_dlvsym(void *handle, const char *name, const char *version)
{
	void *r = md_real_dlvsym(handle, name, version), *shim = md_real_entry(r);

	return shim != NULL ? shim : r;
}

/* RTLD_NEXT is ((void *)-1). */
#define ENTRY(name, real, c)                         \
	".globl " #name "\n"                          \
	".type " #name ", @function\n"                \
	".globl md_" #name "_entry\n"                 \
	".hidden md_" #name "_entry\n"                \
	".p2align 4\n" #name ":\n"                    \
	"md_" #name "_entry:\n"                       \
	"\tcmpq $-1, %rdi\n"                          \
	"\tjne " #c "\n"                              \
	"\tjmp *" #real "(%rip)\n"                    \
	".size " #name ", . - " #name "\n"

__asm__(".text\n" ENTRY(dlsym, md_real_dlsym, md_dlsym) ENTRY(dlvsym, md_real_dlvsym, md_dlvsym));
#endif
