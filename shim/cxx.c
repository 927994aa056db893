// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * C++'s replaceable allocation functions, every form of operator new and
 * delete, on the shim's malloc, memalign and free, as Android's libc++
 * sends them to malloc debug.
 *
 * Without them a C++ program's new reaches malloc through its C++ runtime's
 * operator new: glibc's libstdc++ keeps no frame pointer there, so the
 * function that called new was missing from every backtrace, and an
 * allocator that brings its own operators bypassed the shim altogether.
 * Here operator new has a frame of its own: a block's backtrace starts with
 * it, then the function that called new, as in Android's and valgrind's
 * reports.
 *
 * The shim is C: it cannot catch an exception, and it throws std::bad_alloc
 * through the C++ runtime's own std::__throw_bad_alloc, found when first
 * needed (a C++ program has loaded its runtime by then). The library is
 * built with unwind tables, so the exception unwinds through these frames.
 * As the standard asks, a failing throwing new calls the new_handler until
 * it succeeds, throws, or there is none; a nothrow new returns null at once
 * (the handler may throw, which a C function could not turn into null).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>

typedef void (*new_handler_fn)(void);

/* std::get_new_handler() and std::__throw_bad_alloc(), both runtimes'. */
#define GET_NEW_HANDLER "_ZSt15get_new_handlerv"
#define THROW_BAD_ALLOC "_ZSt17__throw_bad_allocv"

/*
 * new_failed is called when an allocation for a throwing operator new
 * failed: it runs the new_handler and returns, for another try, or throws
 * std::bad_alloc. Without a C++ runtime to throw with, it aborts, as an
 * uncaught exception would.
 */
static __attribute__((noinline, cold)) void new_failed(void)
{
	new_handler_fn (*get)(void) = (new_handler_fn(*)(void))dlsym(RTLD_DEFAULT, GET_NEW_HANDLER);
	void (*throw_bad_alloc)(void);
	new_handler_fn handler = get ? get() : NULL;

	if (handler) {
		handler();
		return;
	}
	throw_bad_alloc = (void (*)(void))dlsym(RTLD_DEFAULT, THROW_BAD_ALLOC);
	if (throw_bad_alloc)
		throw_bad_alloc();
	abort();
}

/*
 * new_block and new_aligned are the throwing forms: never null, zero bytes
 * is one, as in libstdc++. Inlined, so that each operator new calls malloc
 * or memalign from its own frame.
 */
static inline __attribute__((always_inline)) void *new_block(size_t size)
{
	void *p;

	if (size == 0)
		size = 1;
	while ((p = malloc(size)) == NULL)
		new_failed();
	return p;
}

static inline __attribute__((always_inline)) void *new_aligned(size_t size, size_t align)
{
	void *p;

	if (size == 0)
		size = 1;
	while ((p = memalign(align, size)) == NULL)
		new_failed();
	return p;
}

/* operator new(size_t) and new[](size_t) */
void *_Znwm(size_t size) { return new_block(size); }
void *_Znam(size_t size) { return new_block(size); }

/* operator new(size_t, const std::nothrow_t &) and new[] */
void *_ZnwmRKSt9nothrow_t(size_t size, const void *nothrow) { return (void)nothrow, malloc(size ? size : 1); }
void *_ZnamRKSt9nothrow_t(size_t size, const void *nothrow) { return (void)nothrow, malloc(size ? size : 1); }

/* operator new(size_t, std::align_val_t) and new[] */
void *_ZnwmSt11align_val_t(size_t size, size_t align) { return new_aligned(size, align); }
void *_ZnamSt11align_val_t(size_t size, size_t align) { return new_aligned(size, align); }

/* operator new(size_t, std::align_val_t, const std::nothrow_t &) and new[] */
void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *nothrow)
{
	return (void)nothrow, memalign(align, size ? size : 1);
}
void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *nothrow)
{
	return (void)nothrow, memalign(align, size ? size : 1);
}

/*
 * Every operator delete frees: the size and alignment a sized or aligned
 * delete passes are the block's own.
 */
void _ZdlPv(void *p) { free(p); }
void _ZdaPv(void *p) { free(p); }
void _ZdlPvm(void *p, size_t size) { (void)size, free(p); }
void _ZdaPvm(void *p, size_t size) { (void)size, free(p); }
void _ZdlPvRKSt9nothrow_t(void *p, const void *nothrow) { (void)nothrow, free(p); }
void _ZdaPvRKSt9nothrow_t(void *p, const void *nothrow) { (void)nothrow, free(p); }
void _ZdlPvSt11align_val_t(void *p, size_t align) { (void)align, free(p); }
void _ZdaPvSt11align_val_t(void *p, size_t align) { (void)align, free(p); }
void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t align) { (void)size, (void)align, free(p); }
void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t align) { (void)size, (void)align, free(p); }
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nothrow)
{
	(void)align, (void)nothrow, free(p);
}
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *nothrow)
{
	(void)align, (void)nothrow, free(p);
}
