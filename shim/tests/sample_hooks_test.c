// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The shim's hooks with a model of mdtrace's probes in place of the sites
 * (site_model.c), linked into one program: what would reach the probes.
 *
 *   sample_hooks_test off   without MDSHIM_SAMPLE_BYTES: every allocation
 *                           and every free reaches the sites, exactly
 *   sample_hooks_test on    with MDSHIM_SAMPLE_BYTES=N: the blocks reported
 *                           and their weighted bytes are within five
 *                           standard deviations of the Poisson sampling's
 *                           means; no free of an unsampled block reaches
 *                           the free site, every sampled one's does, once;
 *                           a failed realloc keeps the old block's state
 *
 * Both check that sizes are the ones asked for and that the model's table
 * ends empty once everything is freed. LIBC_DEBUG_MALLOC_OPTIONS may turn
 * the shim's checks on as well. The workloads are fixed; only the sampler's
 * draws vary from run to run.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../abi/mdtrace_abi.h"
#include "../sample.h"
#include "check.h"
#include "site_model.h"

/* The shim's realloc calls glibc's through __libc_realloc: this one fails on demand. */
static void *(*real_libc_realloc)(void *, size_t);
static volatile int fail_reallocs;

void *__libc_realloc(void *ptr, size_t size)
{
	if (fail_reallocs) {
		errno = ENOMEM;
		return NULL;
	}
	return real_libc_realloc(ptr, size);
}

/* pair mallocs and frees, through a volatile: the compiler may drop an unused block. */
static void pair(size_t size)
{
	void *volatile p = malloc(size);

	free(p);
}

enum { PAIRS = 200000, HELD = 20000, THREADS = 4, THREAD_BLOCKS = 5000 };

/* size_of is the fixed size of allocation i: 1 to 8192 bytes. */
static size_t size_of(long i)
{
	return 1 + (size_t)(mix64((uint64_t)i + 1) % 8192);
}

static double chance(size_t size)
{
	/* Every block of the interval or more is sampled, as heapprofd does. */
	if (md_sample_bytes == 0 || size >= md_sample_bytes)
		return 1;
	return -expm1(-(double)size / (double)md_sample_bytes);
}

/* within checks that got is within five standard deviations of mean. */
static void within(const char *what, double got, double mean, double var)
{
	double sd = sqrt(var);

	printf("%s: %.0f, mean %.0f, sd %.0f (%+.2f sd)\n", what, got, mean, sd, sd > 0 ? (got - mean) / sd : 0);
	CHECK(fabs(got - mean) <= 5 * sd, "%s: %.0f, want %.0f within %.0f", what, got, mean, 5 * sd);
}

/* pairs: malloc and free of fixed sizes; the rate and the estimates. */
static void pairs(bool sampling)
{
	struct site_model_counts c0 = site_model_counts(), c;
	double mean = 0, var = 0, bytes = 0, bvar = 0, sampled_bytes = 0, svar = 0;

	for (long i = 0; i < PAIRS; i++)
		pair(size_of(i));
	c = site_model_diff(c0, site_model_counts());
	for (long i = 0; i < PAIRS; i++) {
		double s = (double)size_of(i), p = chance(size_of(i));

		mean += p;
		var += p * (1 - p);
		bytes += s;
		bvar += s * s * (1 - p) / p;
		sampled_bytes += s * p;
		svar += s * s * p * (1 - p);
	}
	CHECK(c.unknown_frees == 0 && c.double_allocs == 0, "pairs: %ld unknown frees, %ld blocks reported twice",
	      c.unknown_frees, c.double_allocs);
	CHECK(c.frees == c.allocs && c.live == 0, "pairs: %ld blocks reported, %ld frees, %ld left", c.allocs,
	      c.frees, c.live);
	if (!sampling) {
		CHECK(c.allocs == PAIRS && c.bytes == bytes, "pairs: %ld blocks of %.0f bytes reported, want %d of %.0f",
		      c.allocs, c.bytes, PAIRS, bytes);
		return;
	}
	within("pairs: blocks sampled", (double)c.allocs, mean, var);
	printf("pairs: fraction of the bytes sampled %.4f, mean %.4f\n", c.bytes / bytes, sampled_bytes / bytes);
	within("pairs: bytes sampled", c.bytes, sampled_bytes, svar);
	within("pairs: estimated bytes", c.est_bytes, bytes, bvar);
}

/* check_held checks that each reported block of held has its size. */
static long check_held(const char *what, void **held, const size_t *sizes, bool sampling)
{
	long live = 0;
	size_t size;

	for (int i = 0; i < HELD; i++) {
		if (!site_model_live(held[i], &size)) {
			CHECK(sampling, "%s: block %d not reported", what, i);
			continue;
		}
		live++;
		CHECK(size == sizes[i], "%s: block %d reported with %zu bytes, want %zu", what, i, size, sizes[i]);
	}
	return live;
}

/* held: the whole family, realloc and its failures, then free. */
static void held(bool sampling)
{
	static void *blocks[HELD];
	static size_t sizes[HELD];
	static bool was_live[HELD];
	struct site_model_counts c0 = site_model_counts(), c;
	long live, failed = 0, restored = 0;

	for (int i = 0; i < HELD; i++) {
		size_t s = size_of(PAIRS + i);

		switch (i % 5) {
		case 0:
			blocks[i] = malloc(s);
			break;
		case 1:
			s = 2 * (s / 2 + 1);
			blocks[i] = calloc(2, s / 2);
			break;
		case 2:
			blocks[i] = realloc(NULL, s);
			break;
		case 3:
			s = (s + 63) & ~(size_t)63;
			blocks[i] = aligned_alloc(64, s);
			break;
		case 4:
			if (posix_memalign(&blocks[i], 32, s) != 0)
				blocks[i] = NULL;
			break;
		}
		sizes[i] = s;
		CHECK(blocks[i] != NULL, "block %d: no memory", i);
	}
	live = check_held("allocated", blocks, sizes, sampling);
	c = site_model_diff(c0, site_model_counts());
	CHECK(c.live == live && c.allocs == live, "allocated: %ld live in the model, %ld reported, want %ld", c.live,
	      c.allocs, live);

	for (int i = 0; i < HELD; i++) {
		sizes[i] = size_of(PAIRS + HELD + i);
		blocks[i] = realloc(blocks[i], sizes[i]);
		CHECK(blocks[i] != NULL, "realloc %d: no memory", i);
	}
	live = check_held("reallocated", blocks, sizes, sampling);
	CHECK(site_model_diff(c0, site_model_counts()).live == live, "reallocated: %ld live in the model, want %ld",
	      site_model_diff(c0, site_model_counts()).live, live);

	/* A failed realloc leaves the old block as it was, reported or not. */
	for (int i = 0; i < HELD; i++)
		was_live[i] = site_model_live(blocks[i], NULL);
	fail_reallocs = 1;
	for (int i = 0; i < HELD; i++) {
		void *r = realloc(blocks[i], size_of(i) + (i % 2 ? 0 : 8192));

		if (r != NULL) {
			/* The shim's checks may not call glibc's realloc. */
			blocks[i] = r;
			sizes[i] = size_of(i) + (i % 2 ? 0 : 8192);
			was_live[i] = site_model_live(r, NULL);
			continue;
		}
		failed++;
		restored += was_live[i];
		CHECK(site_model_live(blocks[i], NULL) == was_live[i], "failed realloc %d: reported %d, want %d", i,
		      !was_live[i], was_live[i]);
	}
	fail_reallocs = 0;
	CHECK(getenv("LIBC_DEBUG_MALLOC_OPTIONS") != NULL || failed == HELD, "%ld reallocs failed, want %d", failed,
	      HELD);
	CHECK(site_model_diff(c0, site_model_counts()).restored == restored, "%ld blocks restored, want %ld",
	      site_model_diff(c0, site_model_counts()).restored, restored);
	check_held("after the failed reallocs", blocks, sizes, sampling);

	/* realloc(p, 0) frees p, as free does. */
	for (int i = 0; i < HELD; i += 4) {
		CHECK(realloc(blocks[i], 0) == NULL, "realloc(p, 0) returned a block");
		CHECK(!site_model_live(blocks[i], NULL), "realloc(p, 0) %d: still reported", i);
		blocks[i] = NULL;
	}
	for (int i = 0; i < HELD; i++)
		free(blocks[i]);
	c = site_model_diff(c0, site_model_counts());
	CHECK(c.unknown_frees == 0 && c.double_allocs == 0 && c.live == 0,
	      "held: %ld unknown frees, %ld blocks reported twice, %ld left", c.unknown_frees, c.double_allocs, c.live);
	if (!sampling) {
		/* Allocated, reallocated; freed by realloc, by failed reallocs, by realloc(p, 0) or free. */
		CHECK(c.allocs == 2 * HELD && c.frees == 3 * HELD, "held: %ld blocks, %ld frees, want %d and %d",
		      c.allocs, c.frees, 2 * HELD, 3 * HELD);
	}
}

static void *blocks_of[THREADS][THREAD_BLOCKS];
static pthread_barrier_t barrier;

/* thread_main mallocs and frees, and frees the blocks of the next thread. */
static void *thread_main(void *arg)
{
	long t = (long)arg;

	for (long i = 0; i < THREAD_BLOCKS * 4; i++)
		pair(size_of(t * 1000000 + i));
	for (long i = 0; i < THREAD_BLOCKS; i++)
		blocks_of[t][i] = malloc(size_of(t * 1000000 + i) / 8);
	pthread_barrier_wait(&barrier);
	for (long i = 0; i < THREAD_BLOCKS; i++)
		free(blocks_of[(t + 1) % THREADS][i]);
	return NULL;
}

static void threads(void)
{
	struct site_model_counts c0, c;
	pthread_t th[THREADS];

	pthread_barrier_init(&barrier, NULL, THREADS);
	c0 = site_model_counts();
	for (long t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, thread_main, (void *)t);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	c = site_model_diff(c0, site_model_counts());
	CHECK(c.unknown_frees == 0 && c.double_allocs == 0, "threads: %ld unknown frees, %ld blocks reported twice",
	      c.unknown_frees, c.double_allocs);
	for (int t = 0; t < THREADS; t++)
		for (int i = 0; i < THREAD_BLOCKS; i++)
			CHECK(!site_model_live(blocks_of[t][i], NULL), "threads: block %d of %d still reported", i, t);
}

int main(int argc, char **argv)
{
	bool sampling = argc > 1 && strcmp(argv[1], "on") == 0;

	/* The first call initializes the shim; dlsym may allocate. */
	pair(1);
	real_libc_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "__libc_realloc");
	if (argc != 2 || real_libc_realloc == NULL) {
		fprintf(stderr, "usage: sample_hooks_test off|on\n");
		return 2;
	}
	CHECK((md_sample_bytes != 0) == sampling, "sampling %s, want %s", md_sample_bytes ? "on" : "off", argv[1]);
	pairs(sampling);
	held(sampling);
	threads();
	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return 1;
	}
	return 0;
}
