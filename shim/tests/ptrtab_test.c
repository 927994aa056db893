// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Unit test of the pointer table (ptrtab.c) against a reference model:
 * random puts, gets and takes over a range of pointers large enough to make
 * the shards grow several times, then the same from eight threads on
 * disjoint ranges. Prints "ptrtab ok" or "FAIL: ..." lines; exits 1 on any
 * failure.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../ptrtab.h"

enum { N = 200000, OPS = 2000000, THREADS = 8, THREAD_N = 40000, THREAD_OPS = 400000 };

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

/* Pointers i of a range: mostly 16 apart, as malloc's are, with some far apart. */
static const void *ptr_of(uintptr_t base, size_t i)
{
	return (const void *)(base + (i % 7 == 0 ? (uintptr_t)i << 20 : (uintptr_t)i * 16));
}

/* run_model applies random operations to t and to the model in[] and val[]; returns the mismatches. */
static int run_model(struct md_ptrtab *t, uintptr_t base, size_t n, size_t ops, unsigned seed)
{
	bool *in = calloc(n, sizeof(*in));
	uintptr_t *val = calloc(n, sizeof(*val));
	int bad = 0;

	if (in == NULL || val == NULL)
		return 1;
	for (size_t k = 0; k < ops; k++) {
		size_t i = (size_t)rand_r(&seed) % n;
		const void *p = ptr_of(base, i);
		uintptr_t v = 0;
		bool found;

		switch (rand_r(&seed) % (k < ops / 2 ? 3 : 5)) {
		case 0:
			bad += !md_ptrtab_put(t, p, k);
			in[i] = true;
			val[i] = k;
			break;
		case 1:
			found = md_ptrtab_get(t, p, &v);
			bad += found != in[i] || (found && v != val[i]);
			break;
		default:
			found = md_ptrtab_take(t, p, &v);
			bad += found != in[i] || (found && v != val[i]);
			in[i] = false;
			break;
		}
	}
	/* Everything the model holds is there with its value; nothing else is. */
	for (size_t i = 0; i < n; i++) {
		uintptr_t v = 0;
		bool found = md_ptrtab_get(t, ptr_of(base, i), &v);

		bad += found != in[i] || (found && v != val[i]);
		if (found)
			md_ptrtab_take(t, ptr_of(base, i), NULL);
	}
	for (size_t i = 0; i < n; i++)
		bad += md_ptrtab_get(t, ptr_of(base, i), NULL);
	free(in);
	free(val);
	return bad;
}

static struct md_ptrtab shared = MD_PTRTAB_INITIALIZER;

static void *thread_main(void *arg)
{
	uintptr_t id = (uintptr_t)arg;

	return (void *)(uintptr_t)run_model(&shared, ((uintptr_t)0x10000000 << 16) * (id + 1), THREAD_N,
					     THREAD_OPS, (unsigned)id + 7);
}

int main(void)
{
	static struct md_ptrtab t = MD_PTRTAB_INITIALIZER;
	pthread_t th[THREADS];
	void *bad;

	CHECK(!md_ptrtab_get(&t, (void *)0x1000, NULL));
	CHECK(!md_ptrtab_take(&t, (void *)0x1000, NULL));
	CHECK(run_model(&t, 0x55550000, N, OPS, 1) == 0);
	/* An emptied table takes a new round. */
	CHECK(run_model(&t, 0x7f0000000000, N, OPS, 2) == 0);
	for (uintptr_t i = 0; i < THREADS; i++)
		CHECK(pthread_create(&th[i], NULL, thread_main, (void *)i) == 0);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], &bad);
		CHECK(bad == NULL);
	}
	if (failures == 0)
		printf("ptrtab ok\n");
	return failures == 0 ? 0 : 1;
}
