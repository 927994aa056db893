// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The unwinder's cost (not run by run.sh): N malloc/free pairs at the
 * bottom of the 12-deep chain of unwind_chain.c, built as Debian builds,
 * -O2 without frame pointers. The cost of a pair is the slope between two
 * lengths, and the loop's own time, printed on stderr:
 *
 *   cc -O2 -fomit-frame-pointer -o /tmp/unwind_bench shim/tests/unwind_bench.c shim/tests/unwind_chain.c
 *   for n in 200000 1000000; do time bin/mdtrace -o backtrace -- /tmp/unwind_bench $n; done
 *
 * and the same natively and under heaptrack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "unwind_chain.h"

static void *volatile sink;
static long pairs;

NOINLINE static int pairs_loop(int x)
{
	struct timespec start, end;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (long i = 0; i < pairs; i++) {
		sink = malloc(64 + (size_t)(i & 63));
		free(sink);
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	fprintf(stderr, "%.1f ns per pair in the loop\n",
		((double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec)) / (double)pairs);
	return x + 1;
}

int main(int argc, char **argv)
{
	if (argc != 2 || (pairs = atol(argv[1])) <= 0) {
		fprintf(stderr, "usage: unwind_bench PAIRS\n");
		return 2;
	}
	chain_bottom = pairs_loop;
	return c11(0) < 0;
}
