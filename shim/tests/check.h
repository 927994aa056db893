// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* CHECK, for the tests of the sampler: a failed condition prints its message and counts. */
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                              \
	do {                                          \
		if (!(cond)) {                        \
			fprintf(stderr, __VA_ARGS__); \
			fputc('\n', stderr);          \
			failures++;                   \
		}                                     \
	} while (0)

#endif
