// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The sampler of sample.c, alone: off without MDSHIM_SAMPLE_BYTES; with it,
 * the fraction of allocations sampled is 1 - exp(-size/N) within five
 * standard deviations, from one thread and from eight, and every one of N
 * bytes or more is sampled (heapprofd's rule); a pointer counts as
 * sampled once it is marked, and only then, once.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../log.h"
#include "../sample.h"
#include "check.h"

void md_log(char prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%c ", prio);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

enum { CALLS = 400000, THREADS = 8 };

/* count_sampled counts the allocations of size bytes, out of calls, that md_sample_alloc samples. */
static long count_sampled(size_t size, long calls)
{
	long n = 0;

	for (long i = 0; i < calls; i++)
		n += md_sample_alloc(size);
	return n;
}

static void check_rate(const char *what, size_t size, long calls, long n)
{
	double p = size >= md_sample_bytes ? 1 : -expm1(-(double)size / (double)md_sample_bytes);
	double mean = calls * p, sd = sqrt(calls * p * (1 - p));

	CHECK(fabs(n - mean) <= 5 * sd, "%s: %ld of %ld allocations of %zu bytes sampled, want %.0f within %.0f",
	      what, n, calls, size, mean, 5 * sd);
}

static void *thread_main(void *arg)
{
	*(long *)arg = count_sampled(64, CALLS / THREADS);
	return NULL;
}

int main(void)
{
	static long counts[THREADS];
	pthread_t th[THREADS];
	long total = 0;
	char blocks[1000];

	unsetenv("MDSHIM_SAMPLE_BYTES");
	md_sample_init();
	CHECK(md_sample_bytes == 0, "sampling on without MDSHIM_SAMPLE_BYTES");
	setenv("MDSHIM_SAMPLE_BYTES", "12x", 1);
	md_sample_init();
	CHECK(md_sample_bytes == 0, "sampling on with MDSHIM_SAMPLE_BYTES=12x");

	setenv("MDSHIM_SAMPLE_BYTES", "4096", 1);
	md_sample_init();
	CHECK(md_sample_bytes == 4096, "md_sample_bytes %llu, want 4096", (unsigned long long)md_sample_bytes);
	check_rate("one thread", 64, CALLS, count_sampled(64, CALLS));
	check_rate("one thread", 4095, CALLS / 10, count_sampled(4095, CALLS / 10));
	check_rate("one thread", 4096, CALLS / 10, count_sampled(4096, CALLS / 10));
	check_rate("one thread", 100000, 1000, count_sampled(100000, 1000));
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, thread_main, &counts[i]);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		total += counts[i];
	}
	check_rate("eight threads", 64, CALLS / THREADS * THREADS, total);

	/* Marked pointers are sampled, once; the others never. */
	for (int i = 0; i < 1000; i += 3)
		md_sample_mark(&blocks[i]);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 1000; i++) {
			bool want = round == 0 && i % 3 == 0;
			CHECK(md_sample_take(&blocks[i]) == want, "round %d: block %d taken %d, want %d", round, i, !want, want);
		}
	}
	for (uintptr_t p = 0x10000; p < 0x10000 + 16 * 100000; p += 16)
		CHECK(!md_sample_take((void *)p), "pointer %#lx was never sampled", (unsigned long)p);
	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return 1;
	}
	return 0;
}
