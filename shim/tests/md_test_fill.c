// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * fill_on_alloc, fill_on_free, expand_alloc and huge requests (md_test.c runs
 * them).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "md_test.h"

/* Sizes beyond 0x7fffffff and overflowing requests fail with ENOMEM. */
int test_huge(void)
{
	void *p;

	errno = 0;
	CHECK(malloc((size_t)1 << 31) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(malloc(sz(SIZE_MAX)) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(calloc(1, (size_t)1 << 31) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(calloc(sz(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(memalign(16, (size_t)1 << 31) == NULL && errno == ENOMEM);
	CHECK(posix_memalign(&p, 16, SIZE_MAX) == ENOMEM);
	CHECK(posix_memalign(&p, 11, 100) == EINVAL);
	p = opaque(malloc(100));
	memset(p, 0x5a, 100);
	errno = 0;
	CHECK(realloc(p, sz(SIZE_MAX)) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(realloc(p, (size_t)1 << 31) == NULL && errno == ENOMEM);
	CHECK(all_bytes(p, 0x5a, 100));
	free(p);
	return 0;
}

int test_fill_on_alloc(void)
{
	for (size_t size = 1; size < 2000; size += 37) {
		uint8_t *p = opaque(malloc(size)), *q;
		size_t usable = malloc_usable_size(p);

		CHECK(usable >= size && all_bytes(p, 0xeb, usable));
		memset(p, 0x11, usable);
		q = opaque(realloc(p, size * 3));
		CHECK(all_bytes(q, 0x11, usable));
		CHECK(all_bytes(q + usable, 0xeb, malloc_usable_size(q) - usable));
		free(q);
		p = opaque(calloc(1, size));
		CHECK(all_bytes(p, 0, size));
		free(p);
		p = opaque(memalign(64, size));
		CHECK(all_bytes(p, 0xeb, malloc_usable_size(p)));
		free(p);
		p = opaque(realloc(NULL, size));
		CHECK(all_bytes(p, 0xeb, malloc_usable_size(p)));
		free(p);
	}
	return 0;
}

int test_fill_on_alloc_partial(void)
{
	uint8_t *p = opaque(malloc(100));

	CHECK(all_bytes(p, 0xeb, 25));
	CHECK(p[25] != 0xeb || p[26] != 0xeb || p[27] != 0xeb || p[28] != 0xeb);
	free(p);
	return 0;
}

/* With free_track the block stays mapped, so its free fill can be read. */
int test_fill_on_free(void)
{
	uint8_t *p = opaque(malloc(100));
	size_t usable = malloc_usable_size(p);

	memset(p, 0, usable);
	free(p);
	CHECK(all_bytes(p, 0xef, usable));
	return 0;
}

int test_fill_on_free_partial(void)
{
	uint8_t *p = opaque(malloc(100));

	memset(p, 0, 100);
	free(p);
	CHECK(all_bytes(p, 0xef, 30));
	CHECK(all_bytes(p + 30, 0, 70));
	return 0;
}

int test_expand_alloc(void)
{
	void *p = opaque(malloc(10)), *q;

	CHECK(malloc_usable_size(p) >= 10 + 1024);
	q = opaque(realloc(p, 2000));
	CHECK(malloc_usable_size(q) >= 2000 + 1024);
	free(q);
	p = opaque(calloc(10, 10));
	CHECK(malloc_usable_size(p) >= 100 + 1024);
	free(p);
	p = opaque(memalign(128, 10));
	CHECK(malloc_usable_size(p) >= 10 + 1024 && ((uintptr_t)p & 127) == 0);
	free(p);
	p = opaque(aligned_alloc(64, 128));
	CHECK(malloc_usable_size(p) >= 128 + 1024);
	free(p);
	return 0;
}

/* fill_on_alloc fills every byte of blocks of 1 to 300 bytes, whatever the size. */
int test_fill_every_size(void)
{
	for (size_t s = 1; s <= 300; s++) {
		uint8_t *p = opaque(malloc(s));

		CHECK(all_bytes(p, 0xeb, s));
		p = opaque(realloc(p, s + 1));
		CHECK(all_bytes(p, 0xeb, s + 1));
		free(p);
	}
	return 0;
}
