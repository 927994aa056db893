// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The code the unwinder's tests walk (unwind_chain.c), and what the driver sets. */
#ifndef UNWIND_CHAIN_H
#define UNWIND_CHAIN_H

#include <signal.h>
#include <stdlib.h>

/*
 * NOINLINE keeps a function a frame of its own: no inlining, and with gcc
 * no clone under another name (f.constprop.0) either.
 */
#if defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noipa))
#endif

/*
 * LINK defines cN(x), which calls next(x + 1) and then adds its result to
 * counter, so that the call is no tail call.
 */
#define LINK(n, next, counter)          \
	NOINLINE int c##n(int x)        \
	{                               \
		int r = next(x + 1);    \
		counter += r;           \
		return r;               \
	}

/*
 * drop_block frees a leaf's block p, its front guard corrupted first if
 * corrupt is set (under the shim's front_guard, the free reports it).
 * Otherwise it frees the leaf's block before and keeps p: batched, a block
 * freed while its allocation is in the batch takes both calls back, and
 * the test reads the frames of the last allocation the batch handed over.
 * Always inlined: free is called from the leaf's frame. Through a
 * volatile, so that the compiler neither drops the allocation nor warns
 * of p[-1].
 */
static inline __attribute__((always_inline)) void drop_block(char *p, int corrupt)
{
	static char *volatile kept;
	volatile char *volatile q = p;

	if (corrupt) {
		q[-1] = 0;
		free((char *)q);
		return;
	}
	free(kept);
	kept = p;
}

/*
 * LEAF defines name(x), a leaf that allocates a block with the expression
 * alloc (of x) and drops it (drop_block).
 */
#define LEAF(name, alloc, corrupt, counter)             \
	NOINLINE int name(int x)                        \
	{                                               \
		drop_block((char *)(alloc), corrupt);   \
		counter++;                              \
		return x + 1;                           \
	}

/* What c1 calls: leaf, spin, or a function of a dlopen'ed library. */
extern int (*chain_bottom)(int);
/* leaf corrupts its block's front guard before it frees it (under the shim's front_guard). */
extern volatile int chain_corrupt;

int leaf(int x);
int spin(int x);
void on_signal(int sig);
int c11(int x);

#endif
