// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The unwinder's C++ test program (run_unwind.sh), built without frame
 * pointers: main calls c3 to c1, and c1 a leaf that allocates with
 *
 *   unwind_cxx new       new, the shim's operator new
 *   unwind_cxx stdnew    libstdc++'s own operator new, which calls malloc
 *                        from a frame without a frame pointer
 *
 * and frees the block, reported as unwind_test's are (unwind_report.c).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unwind_chain.h"
#include "unwind_report.h"

struct block {
	char bytes[100];
};

typedef void *(*new_fn)(size_t);

static volatile int corrupt, count;
static void *volatile sink;
static new_fn std_new;
static int (*bottom)(int);

/* Batched, the last block stays (drop_block in unwind_chain.h says why). */
NOINLINE int leaf_new(int x)
{
	static block *volatile kept;
	block *volatile b = new block;
	char *volatile bytes = b->bytes;

	sink = b;
	if (corrupt) {
		bytes[-1] = 0;
		delete b;
	} else {
		delete kept;
		kept = b;
	}
	count++;
	return x + 1;
}

LEAF(leaf_stdnew, std_new(100), corrupt, count)

LINK(1, bottom, count)
LINK(2, c1, count)
LINK(3, c2, count)

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int r;

	corrupt = !unwind_batched();
	if (strcmp(mode, "new") == 0) {
		bottom = leaf_new;
	} else if (strcmp(mode, "stdnew") == 0) {
		void *lib = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);

		/* With a handle, dlsym finds the library's own definition first. */
		std_new = lib != NULL ? reinterpret_cast<new_fn>(dlsym(lib, "_Znwm")) : NULL;
		if (std_new == NULL) {
			fprintf(stderr, "no libstdc++ operator new\n");
			return 2;
		}
		bottom = leaf_stdnew;
	} else {
		fprintf(stderr, "usage: unwind_cxx new|stdnew\n");
		return 2;
	}
	unwind_begin();
	r = c3(0);
	unwind_end();
	return r < 0;
}
