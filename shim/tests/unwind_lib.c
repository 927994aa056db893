// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A library unwind_test dlopens (run_unwind.sh), built with the flags
 * under test: lib_entry calls lib_leaf, which allocates and frees a block,
 * its front guard corrupted first if lib_corrupt is set.
 */
#include "unwind_chain.h"

volatile int lib_corrupt;
static volatile int count;

LEAF(lib_leaf, malloc(200 + (size_t)(x & 1)), lib_corrupt, count)

#ifndef NO_ENTRY /* unwind_reload.S has it */
NOINLINE int lib_entry(int x)
{
	int r = lib_leaf(x + 1);

	count += r;
	return r;
}
#endif
