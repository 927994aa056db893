// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The reports of the unwinder's test programs (unwind_test.c,
 * unwind_cxx.cc): the shim's functions are found with dlsym, in whichever
 * shim is preloaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../unwind.h"
#include "unwind_report.h"

static uint64_t before[MD_UNWIND_STOPS];

static void *shim(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);

	if (f == NULL) {
		fprintf(stderr, "no %s: run under the shim\n", name);
		exit(2);
	}
	return f;
}

int unwind_batched(void)
{
	return dlsym(RTLD_DEFAULT, "site_model_last_frames") != NULL;
}

void unwind_begin(void)
{
	((void (*)(uint64_t *))shim("md_unwind_stops"))(before);
}

void unwind_end(void)
{
	static const char *const names[MD_UNWIND_STOPS] = {"end", "frame_limit", "no_fde", "bad_ra", "unsupported",
							   "stack_bounds"};
	uint64_t after[MD_UNWIND_STOPS];

	uint64_t frames[256];
	size_t n = 0;

	((void (*)(uint64_t *))shim("md_unwind_stops"))(after);
	/* Before stdio allocates its buffer, the last batched allocation. */
	if (unwind_batched()) {
		size_t (*last)(uint64_t *, size_t) = (size_t(*)(uint64_t *, size_t))shim("site_model_last_frames");
		void *volatile none = NULL;

		/* A realloc hands the batch over. */
		free(realloc(none, 1));
		n = last(frames, 256);
	}
	printf("stops");
	for (int i = 0; i < MD_UNWIND_STOPS; i++)
		if (after[i] != before[i])
			printf(" %s=%llu", names[i], (unsigned long long)(after[i] - before[i]));
	printf("\n");
	if (n > 0) {
		void (*log)(const uintptr_t *, size_t) = (void (*)(const uintptr_t *, size_t))shim("md_backtrace_log");

		/* Return addresses, as batched; the log wants the calls' pcs. */
		for (size_t i = 0; i < n; i++)
			frames[i]--;
		log((const uintptr_t *)frames, n);
	}
}
