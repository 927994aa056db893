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
#include <string.h>

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

/* Every form, by its symbol. */
enum op {
	OP_NEW,
	OP_NEW_ARRAY,
	OP_NEW_NOTHROW,
	OP_NEW_ARRAY_NOTHROW,
	OP_NEW_ALIGNED,
	OP_NEW_ARRAY_ALIGNED,
	OP_NEW_ALIGNED_NOTHROW,
	OP_NEW_ARRAY_ALIGNED_NOTHROW,
	OP_DELETE,
	OP_DELETE_ARRAY,
	OP_DELETE_SIZED,
	OP_DELETE_ARRAY_SIZED,
	OP_DELETE_NOTHROW,
	OP_DELETE_ARRAY_NOTHROW,
	OP_DELETE_ALIGNED,
	OP_DELETE_ARRAY_ALIGNED,
	OP_DELETE_SIZED_ALIGNED,
	OP_DELETE_ARRAY_SIZED_ALIGNED,
	OP_DELETE_ALIGNED_NOTHROW,
	OP_DELETE_ARRAY_ALIGNED_NOTHROW,
	OP_COUNT,
};

static const char *const op_symbol[OP_COUNT] = {
	"_Znwm",
	"_Znam",
	"_ZnwmRKSt9nothrow_t",
	"_ZnamRKSt9nothrow_t",
	"_ZnwmSt11align_val_t",
	"_ZnamSt11align_val_t",
	"_ZnwmSt11align_val_tRKSt9nothrow_t",
	"_ZnamSt11align_val_tRKSt9nothrow_t",
	"_ZdlPv",
	"_ZdaPv",
	"_ZdlPvm",
	"_ZdaPvm",
	"_ZdlPvRKSt9nothrow_t",
	"_ZdaPvRKSt9nothrow_t",
	"_ZdlPvSt11align_val_t",
	"_ZdaPvSt11align_val_t",
	"_ZdlPvmSt11align_val_t",
	"_ZdaPvmSt11align_val_t",
	"_ZdlPvSt11align_val_tRKSt9nothrow_t",
	"_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

/*
 * A program may replace operator new and delete in a library of its own (a
 * pool allocator), and the shim, preloaded, would come before it. Then the
 * shim stands aside: every form goes to the definition that comes after the
 * shim, as if the shim did not define them, so that the program allocates
 * and frees where it meant to. The shim takes the C++ runtime's place only:
 * libstdc++'s and libc++'s operators call malloc and free themselves.
 * Decided once, at the first call: op_state is 0 until then, 1 where the
 * shim's operators serve, 2 where they hand over (op_next).
 */
static void *op_next[OP_COUNT];
static int op_state;

/*
 * runtime_file reports whether path is a C++ runtime library (the names
 * tracer.IsCxxRuntime knows).
 */
static int runtime_file(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return strncmp(base, "libstdc++.so", 12) == 0 || strncmp(base, "libc++.so", 9) == 0 ||
	       strncmp(base, "libc++abi.so", 12) == 0;
}

static __attribute__((noinline, cold)) int decide(void)
{
	int hand_over = 0;

	for (int i = 0; i < OP_COUNT; i++) {
		Dl_info info;
		void *next = dlsym(RTLD_NEXT, op_symbol[i]);

		op_next[i] = next;
		if (next && !(dladdr(next, &info) && info.dli_fname && runtime_file(info.dli_fname)))
			hand_over = 1;
	}
	__atomic_store_n(&op_state, hand_over ? 2 : 1, __ATOMIC_RELEASE);
	return hand_over;
}

/* next returns where operator op goes instead of the shim's, or NULL. */
static inline __attribute__((always_inline)) void *next(enum op op)
{
	int st = __atomic_load_n(&op_state, __ATOMIC_ACQUIRE);

	if (__builtin_expect(st == 1, 1))
		return NULL;
	if (st == 0 && !decide())
		return NULL;
	return op_next[op];
}

/*
 * NEXT returns what the definition operator op hands over to returns, if it
 * does; NEXT_VOID calls it and returns, for a delete.
 */
#define NEXT(op, type, ...)                              \
	do {                                             \
		void *fn_ = next(op);                    \
		if (fn_)                                 \
			return ((type)fn_)(__VA_ARGS__); \
	} while (0)
#define NEXT_VOID(op, type, ...)                   \
	do {                                       \
		void *fn_ = next(op);              \
		if (fn_) {                         \
			((type)fn_)(__VA_ARGS__);  \
			return;                    \
		}                                  \
	} while (0)

typedef void *(*new_fn)(size_t);
typedef void *(*new2_fn)(size_t, const void *);
typedef void *(*new_aligned_fn)(size_t, size_t);
typedef void *(*new3_fn)(size_t, size_t, const void *);
typedef void (*delete_fn)(void *);
typedef void (*delete2_fn)(void *, size_t);
typedef void (*delete_nothrow_fn)(void *, const void *);
typedef void (*delete3_fn)(void *, size_t, size_t);
typedef void (*delete_aligned_nothrow_fn)(void *, size_t, const void *);

/*
 * DEFINE_NEW defines an operator new that hands over (NEXT) or returns own;
 * DEFINE_DELETE an operator delete that hands over or frees: the size and
 * alignment a sized or aligned delete passes are the block's own.
 */
#define DEFINE_NEW(name, op, type, params, own, ...) \
	void *name params                            \
	{                                            \
		NEXT(op, type, __VA_ARGS__);         \
		return own;                          \
	}
#define DEFINE_DELETE(name, op, type, params, ...) \
	void name params                           \
	{                                          \
		NEXT_VOID(op, type, __VA_ARGS__);  \
		free(p);                           \
	}

/* new(size_t), new[](size_t), and their nothrow forms */
DEFINE_NEW(_Znwm, OP_NEW, new_fn, (size_t size), new_block(size), size)
DEFINE_NEW(_Znam, OP_NEW_ARRAY, new_fn, (size_t size), new_block(size), size)
DEFINE_NEW(_ZnwmRKSt9nothrow_t, OP_NEW_NOTHROW, new2_fn, (size_t size, const void *nothrow), malloc(size ? size : 1),
	   size, nothrow)
DEFINE_NEW(_ZnamRKSt9nothrow_t, OP_NEW_ARRAY_NOTHROW, new2_fn, (size_t size, const void *nothrow),
	   malloc(size ? size : 1), size, nothrow)

/* new(size_t, std::align_val_t), new[], and their nothrow forms */
DEFINE_NEW(_ZnwmSt11align_val_t, OP_NEW_ALIGNED, new_aligned_fn, (size_t size, size_t align),
	   new_aligned(size, align), size, align)
DEFINE_NEW(_ZnamSt11align_val_t, OP_NEW_ARRAY_ALIGNED, new_aligned_fn, (size_t size, size_t align),
	   new_aligned(size, align), size, align)
DEFINE_NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, OP_NEW_ALIGNED_NOTHROW, new3_fn,
	   (size_t size, size_t align, const void *nothrow), memalign(align, size ? size : 1), size, align, nothrow)
DEFINE_NEW(_ZnamSt11align_val_tRKSt9nothrow_t, OP_NEW_ARRAY_ALIGNED_NOTHROW, new3_fn,
	   (size_t size, size_t align, const void *nothrow), memalign(align, size ? size : 1), size, align, nothrow)

/* every delete */
DEFINE_DELETE(_ZdlPv, OP_DELETE, delete_fn, (void *p), p)
DEFINE_DELETE(_ZdaPv, OP_DELETE_ARRAY, delete_fn, (void *p), p)
DEFINE_DELETE(_ZdlPvm, OP_DELETE_SIZED, delete2_fn, (void *p, size_t size), p, size)
DEFINE_DELETE(_ZdaPvm, OP_DELETE_ARRAY_SIZED, delete2_fn, (void *p, size_t size), p, size)
DEFINE_DELETE(_ZdlPvRKSt9nothrow_t, OP_DELETE_NOTHROW, delete_nothrow_fn, (void *p, const void *nothrow), p, nothrow)
DEFINE_DELETE(_ZdaPvRKSt9nothrow_t, OP_DELETE_ARRAY_NOTHROW, delete_nothrow_fn, (void *p, const void *nothrow), p,
	      nothrow)
DEFINE_DELETE(_ZdlPvSt11align_val_t, OP_DELETE_ALIGNED, delete2_fn, (void *p, size_t align), p, align)
DEFINE_DELETE(_ZdaPvSt11align_val_t, OP_DELETE_ARRAY_ALIGNED, delete2_fn, (void *p, size_t align), p, align)
DEFINE_DELETE(_ZdlPvmSt11align_val_t, OP_DELETE_SIZED_ALIGNED, delete3_fn, (void *p, size_t size, size_t align), p,
	      size, align)
DEFINE_DELETE(_ZdaPvmSt11align_val_t, OP_DELETE_ARRAY_SIZED_ALIGNED, delete3_fn, (void *p, size_t size, size_t align),
	      p, size, align)
DEFINE_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, OP_DELETE_ALIGNED_NOTHROW, delete_aligned_nothrow_fn,
	      (void *p, size_t align, const void *nothrow), p, align, nothrow)
DEFINE_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, OP_DELETE_ARRAY_ALIGNED_NOTHROW, delete_aligned_nothrow_fn,
	      (void *p, size_t align, const void *nothrow), p, align, nothrow)
