// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * dlsym and dlvsym: a program that looks the allocator's functions up in
 * its library (ctypes.CDLL("libc.so.6").malloc, dlsym(libc, "malloc"))
 * would call them past the shim, and mdtrace would see none of its blocks.
 * The shim's dlsym gives the shim's own entry point for each of them
 * (real.c), and every other answer unchanged, dlerror's included.
 *
 * The loader finds RTLD_NEXT's object, and the scope RTLD_DEFAULT searches,
 * from its caller's return address: for those the entry points jump to
 * the loader's function, keeping the caller's, rather than call it. Their
 * answer for the allocator's functions is the shim's already (RTLD_DEFAULT)
 * or what comes after the caller, never the library the shim replaces in
 * a program it is given (RTLD_NEXT). A handle's lookup does not depend on
 * its caller: it is made from here, and its answer mapped.
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

/* RTLD_DEFAULT is ((void *)0), RTLD_NEXT ((void *)-1). */
#define ENTRY(name, real, c)                         \
	".globl " #name "\n"                          \
	".type " #name ", @function\n"                \
	".globl md_" #name "_entry\n"                 \
	".hidden md_" #name "_entry\n"                \
	".p2align 4\n" #name ":\n"                    \
	"md_" #name "_entry:\n"                       \
	"\ttestq %rdi, %rdi\n"                        \
	"\tje 1f\n"                                   \
	"\tcmpq $-1, %rdi\n"                          \
	"\tjne " #c "\n"                              \
	"1:\tjmp *" #real "(%rip)\n"                  \
	".size " #name ", . - " #name "\n"

__asm__(".text\n" ENTRY(dlsym, md_real_dlsym, md_dlsym) ENTRY(dlvsym, md_real_dlvsym, md_dlvsym));
#endif
