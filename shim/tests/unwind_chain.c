// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The code the unwinder's tests walk (run_unwind.sh), built with each
 * compiler and set of flags under test: a chain of calls c11 to c1 from
 * unwind_test's main down to the bottom the test picks, leaf (malloc and
 * free), spin (which a signal interrupts; the handler calls leaf), or a
 * dlopen'ed library's lib_entry. Each call does work after its callee
 * returns, so that no call is a tail call.
 */
#include "unwind_chain.h"

int (*chain_bottom)(int);
volatile int chain_corrupt;
static volatile sig_atomic_t spinning, signalled;
static volatile int count;

LEAF(leaf, malloc(100 + (size_t)(x & 1)), chain_corrupt, count)

/* spin waits for the signal, which stops it anywhere in its loop. */
NOINLINE int spin(int x)
{
	spinning = 1;
	while (!signalled)
		;
	spinning = 0;
	return x + 1;
}

void on_signal(int sig)
{
	if (spinning && !signalled) {
		leaf(sig);
		signalled = 1;
	}
}

LINK(1, chain_bottom, count)
LINK(2, c1, count)
LINK(3, c2, count)
LINK(4, c3, count)
LINK(5, c4, count)
LINK(6, c5, count)
LINK(7, c6, count)
LINK(8, c7, count)
LINK(9, c8, count)
LINK(10, c9, count)
LINK(11, c10, count)
