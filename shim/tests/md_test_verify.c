// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * verify_pointers: unknown pointers, and correct programs that must report
 * nothing (md_test.c runs them).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md_test.h"

/* Android's verify_pointers test: a freed pointer passed to free, malloc_usable_size and realloc. */
int test_verify_pointers(void)
{
	uint8_t *p = opaque(malloc(10));

	name_ptr("P", p);
	memset(p, 0, 10);
	free(p);
	free(p);
	CHECK(malloc_usable_size(p) == 0);
	CHECK(realloc(p, 1000) == NULL);
	return 0;
}

/* A pointer into a block and one that never came from malloc; the block itself stays valid. */
int test_verify_pointers_interior(void)
{
	uint8_t *p = opaque(malloc(100));
	uint64_t local = 0;

	name_ptr("P", p);
	name_ptr("Q", p + 16);
	name_ptr("S", &local);
	memset(p, 0x5a, 100);
	free(opaque(p + 16));
	CHECK(malloc_usable_size(opaque(p + 16)) == 0);
	free(opaque(&local));
	CHECK(all_bytes(p, 0x5a, 100) && malloc_usable_size(p) >= 100);
	p = opaque(realloc(p, 200));
	CHECK(p != NULL && all_bytes(p, 0x5a, 100));
	free(p);
	return 0;
}

/* A block realloc moved: the old pointer is no longer known. */
int test_verify_pointers_realloc_moved(void)
{
	uint8_t *p = opaque(malloc(16)), *q;

	name_ptr("P", p);
	memset(p, 0x33, 16);
	q = opaque(realloc(p, 1 << 20));
	CHECK(q != p && all_bytes(q, 0x33, 16));
	free(p);
	free(q);
	return 0;
}

/*
 * Pointers no allocator gave out: one in memory that is not mapped, one
 * odd. With a header, its memory is not read before the pointer is known
 * to be a live block (it would kill the program). A large block's memory
 * goes back to the kernel when it is freed, its header with it. The live
 * block stays valid.
 */
int test_verify_wild(void)
{
	void *wild = (void *)(uintptr_t)0xdead0000, *odd = (void *)(uintptr_t)0x87654321;
	uint8_t *p = opaque(malloc(48)), *big = opaque(malloc(1 << 20));

	name_ptr("P", wild);
	name_ptr("Q", odd);
	name_ptr("S", big);
	memset(p, 0x5a, 48);
	free(opaque(wild));
	CHECK(malloc_usable_size(opaque(wild)) == 0);
	CHECK(realloc(opaque(odd), 10) == NULL);
	free(big);
	free(opaque(big));
	CHECK(all_bytes(p, 0x5a, 48) && malloc_usable_size(p) >= 48);
	free(p);
	return 0;
}

/* A correct program using every entry point and glibc's own allocating functions. */
int test_verify_clean(void)
{
	enum { N = 50000 };
	static void *blocks[N];
	static size_t sizes[N];
	unsigned seed = 1;
	char *line = NULL, *s = NULL;
	size_t cap = 0;
	FILE *f;

	for (size_t i = 0; i < N; i++) {
		size_t size = (size_t)(rand_r(&seed) % 500);

		switch (i % 8) {
		case 0:
			blocks[i] = malloc(size);
			break;
		case 1:
			blocks[i] = calloc(1, size);
			break;
		case 2:
			blocks[i] = memalign(64, size);
			break;
		case 3:
			CHECK(posix_memalign(&blocks[i], 32, size) == 0);
			break;
		case 4:
			blocks[i] = aligned_alloc(16, (size + 15) & ~(size_t)15);
			break;
		case 5:
			blocks[i] = realloc(NULL, size);
			break;
		case 6:
			blocks[i] = reallocarray(NULL, size, 2);
			size *= 2;
			break;
		default:
			blocks[i] = i % 16 == 7 ? valloc(size) : pvalloc(size);
			break;
		}
		CHECK(blocks[i] != NULL && malloc_usable_size(blocks[i]) >= size);
		sizes[i] = size;
		memset(blocks[i], (int)(i & 0xff), size);
	}
	for (size_t i = 0; i < N; i += 3) {
		size_t size = sizes[i] * 2 + 1;
		void *q = realloc(blocks[i], size);

		CHECK(q != NULL && all_bytes(q, (int)(i & 0xff), sizes[i]));
		blocks[i] = q;
		sizes[i] = size;
	}
	for (size_t i = N; i-- > 0;) {
		size_t j = (size_t)rand_r(&seed) % (i + 1);
		void *t = blocks[i];

		blocks[i] = blocks[j];
		blocks[j] = t;
	}
	for (size_t i = 0; i < N; i++)
		free(blocks[i]);
	free(NULL);
	CHECK(realloc(malloc(10), 0) == NULL);
	s = strdup("verify_pointers");
	CHECK(s != NULL);
	free(s);
	CHECK(asprintf(&s, "%d blocks", N) > 0);
	free(s);
	f = fopen("/proc/self/status", "r");
	CHECK(f != NULL);
	if (f != NULL) {
		CHECK(getline(&line, &cap, f) > 0);
		fclose(f);
	}
	free(line);
	fprintf(stderr, "clean done\n");
	return 0;
}

/*
 * Eight threads with thousands of live blocks each allocate, check, resize
 * and free, and hand blocks to each other through shared slots, so that a
 * block is often freed by a thread other than the one that allocated it.
 */
enum { SHARED_SLOTS = 256, LIVE_PER_THREAD = 6000 };
static uint8_t *volatile shared_slots[SHARED_SLOTS];

static uint8_t *stamp_alloc(unsigned *seed, size_t *size_out)
{
	size_t size = 8 + (size_t)(rand_r(seed) % 600);
	uint8_t *p;

	switch (rand_r(seed) % 4) {
	case 0:
		p = malloc(size);
		break;
	case 1:
		p = calloc(1, size);
		break;
	case 2:
		p = memalign(64, size);
		break;
	default:
		p = realloc(NULL, size);
		break;
	}
	if (p == NULL)
		return NULL;
	/* The first 8 bytes hold the size, the rest a pattern derived from it. */
	memcpy(p, &size, sizeof(size));
	for (size_t j = 8; j < size; j++)
		p[j] = (uint8_t)(size + j);
	*size_out = size;
	return p;
}

static int stamp_ok(const uint8_t *p)
{
	size_t size;

	memcpy(&size, p, sizeof(size));
	if (size < 8 || size > 1000 || malloc_usable_size((void *)p) < size)
		return 0;
	for (size_t j = 8; j < size; j++)
		if (p[j] != (uint8_t)(size + j))
			return 0;
	return 1;
}

static void *verify_stress_thread(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	uint8_t **live = calloc(LIVE_PER_THREAD, sizeof(*live));
	size_t size;
	int bad = 0;

	if (live == NULL)
		return (void *)1;
	for (int i = 0; i < LIVE_PER_THREAD; i++)
		live[i] = stamp_alloc(&seed, &size);
	for (int iter = 0; iter < 40000; iter++) {
		int i = rand_r(&seed) % LIVE_PER_THREAD;
		uint8_t *p = live[i];

		if (p == NULL || !stamp_ok(p)) {
			bad++;
			continue;
		}
		switch (rand_r(&seed) % 4) {
		case 0: {
			size_t new_size = 8 + (size_t)(rand_r(&seed) % 600);
			uint8_t *q = realloc(p, new_size);

			if (q == NULL) {
				bad++;
				continue;
			}
			memcpy(q, &new_size, sizeof(new_size));
			for (size_t j = 8; j < new_size; j++)
				q[j] = (uint8_t)(new_size + j);
			live[i] = q;
			break;
		}
		case 1:
			/* Hand the block over; free whatever another thread left there. */
			p = __atomic_exchange_n(&shared_slots[rand_r(&seed) % SHARED_SLOTS], p,
						__ATOMIC_ACQ_REL);
			if (p != NULL && !stamp_ok(p))
				bad++;
			free(p);
			live[i] = stamp_alloc(&seed, &size);
			break;
		default:
			free(p);
			live[i] = stamp_alloc(&seed, &size);
			break;
		}
	}
	for (int i = 0; i < LIVE_PER_THREAD; i++)
		free(live[i]);
	free(live);
	return (void *)(uintptr_t)bad;
}

int test_verify_stress(void)
{
	pthread_t t[8];
	void *bad;

	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, verify_stress_thread, (void *)(uintptr_t)(i + 1)) == 0);
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], &bad);
		CHECK(bad == NULL);
	}
	for (int i = 0; i < SHARED_SLOTS; i++) {
		CHECK(shared_slots[i] == NULL || stamp_ok(shared_slots[i]));
		free(shared_slots[i]);
	}
	fprintf(stderr, "stress done\n");
	return 0;
}
