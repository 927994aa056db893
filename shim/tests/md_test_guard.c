// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The guards and their header: corrupted guards and tags, realloc and calloc
 * of guarded blocks, alignment, abort_on_error (md_test.c runs them).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "md_test.h"

int test_front_guard_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	p[-32] = 0x00;
	p[-15] = 0x02;
	free(p);
	return 0;
}

int test_rear_guard_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	CHECK(malloc_usable_size(p) == 100);
	p[130] = 0xbf;
	p[131] = 0x00;
	free(p);
	return 0;
}

int test_rear_guard_shrink(void)
{
	uint8_t *p = opaque(malloc(200));
	uint8_t *q;

	memset(p, 0, 200);
	q = opaque(realloc(p, 100));
	CHECK(q == p);
	CHECK(malloc_usable_size(q) == 100);
	name_ptr("P", q);
	q[130] = 0xbf;
	q[131] = 0x00;
	free(q);
	return 0;
}

int test_both_guards_corrupted(void)
{
	uint8_t *p = opaque(malloc(10));

	name_ptr("P", p);
	p[-1] = 0x01;
	p[10] = 0x02;
	p[41] = 0x03;
	free(p);
	return 0;
}

int test_tag_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));
	uint8_t saved;

	name_ptr("P", p);
	saved = p[-32];
	p[-32] = 0x00;
	CHECK(malloc_usable_size(p) == 0);
	CHECK(realloc(p, 200) == NULL);
	free(p);
	p[-32] = saved;
	CHECK(malloc_usable_size(p) == 100);
	free(p);
	return 0;
}

int test_guard_realloc(void)
{
	uint8_t *p = opaque(malloc(40)), *q;

	for (int i = 0; i < 40; i++)
		p[i] = (uint8_t)i;
	q = opaque(realloc(p, 40));
	/* With expand_alloc the compared size includes the expansion, as on Android. */
	CHECK(q == p || strstr(getenv("LIBC_DEBUG_MALLOC_OPTIONS"), "expand_alloc") != NULL);
	q = opaque(realloc(q, 4000));
	for (int i = 0; i < 40; i++)
		CHECK(q[i] == (uint8_t)i);
	q = opaque(realloc(q, 10));
	for (int i = 0; i < 10; i++)
		CHECK(q[i] == (uint8_t)i);
	CHECK(realloc(q, 0) == NULL);
	q = opaque(reallocarray(NULL, 10, 10));
	CHECK(q != NULL);
	errno = 0;
	CHECK(reallocarray(q, sz(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM);
	free(q);
	return 0;
}

/*
 * A realloc that shrinks a block by fewer bytes than expand_alloc adds, with
 * a rear guard, moves it: the contents come along, and the new block's rear
 * guard stays whole (a copy of the old block's whole size ran into it).
 */
int test_guard_realloc_shrink(void)
{
	uint8_t *p = opaque(malloc(6514)), *q;

	for (int i = 0; i < 6514; i++)
		p[i] = (uint8_t)i;
	q = opaque(realloc(p, 6510));
	for (int i = 0; i < 6510; i++)
		CHECK(q[i] == (uint8_t)i);
	memset(q, 1, 6510);
	free(q);
	return 0;
}

/*
 * Blocks of many sizes: malloc_usable_size covers the request, calloc's
 * blocks are zero, and writing a whole block disturbs nothing. Run with
 * another allocator preloaded after the shim, whose malloc_usable_size
 * knows nothing of the shim's blocks.
 */
int test_usable_calloc(void)
{
	for (size_t n = 1; n < 2000; n += 37) {
		uint8_t *p = opaque(malloc(n)), *q = opaque(calloc(1, n));

		CHECK(p != NULL && q != NULL && malloc_usable_size(p) >= n && malloc_usable_size(q) >= n);
		for (size_t i = 0; i < n; i++)
			CHECK(q[i] == 0);
		memset(p, 0x5a, n);
		memset(q, 0x77, n);
		free(p);
		free(q);
	}
	return 0;
}

/* A calloc'd block written one byte past its end. */
int test_calloc_overrun(void)
{
	uint8_t *q = opaque(calloc(1, 10));

	name_ptr("P", q);
	q[10] = 0x5a;
	free(q);
	return 0;
}

int test_abort(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	p[-1] = 0;
	free(p);
	fprintf(stderr, "FAIL: still running\n");
	return 0;
}

static int check_aligned(void *p, size_t align)
{
	return p != NULL && ((uintptr_t)p & (align - 1)) == 0;
}

int test_alignment(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	static const size_t aligns[] = { 1, 2, 8, 16, 24, 32, 64, 100, 256, 4096, 8192 };

	for (size_t size = 0; size < 300; size++) {
		void *p = opaque(malloc(size)), *q;

		CHECK(check_aligned(p, 16));
		q = opaque(calloc(1, size));
		CHECK(check_aligned(q, 16));
		p = opaque(realloc(p, size * 2 + 1));
		CHECK(check_aligned(p, 16));
		free(p);
		free(q);
	}
	for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
		size_t a = aligns[i], want = 1;
		void *p;

		while (want < a)
			want <<= 1;
		if (want < 16)
			want = 16;
		for (size_t size = 1; size < 5000; size += 999) {
			p = opaque(memalign(a, size));
			CHECK(check_aligned(p, want));
			free(p);
		}
	}
	for (size_t a = 8; a <= 4096; a *= 2) {
		void *p = NULL;

		CHECK(posix_memalign(&p, a, 100) == 0 && check_aligned(p, a < 16 ? 16 : a));
		free(p);
		p = opaque(aligned_alloc(a, a * 3));
		CHECK(check_aligned(p, a < 16 ? 16 : a));
		free(p);
	}
	void *v = opaque(valloc(10));
	CHECK(check_aligned(v, page));
	free(v);
	v = opaque(pvalloc(10));
	CHECK(check_aligned(v, page) && malloc_usable_size(v) >= 10);
	free(v);
	return 0;
}

/*
 * A copy of a live block's header, front guard and contents elsewhere (with
 * "guard": 32 bytes of header, 32 of front guard): the tag is right, but the
 * header belongs to another address, so the copy is no block at all.
 */
int test_guard_forged_header(void)
{
	uint8_t *p = opaque(malloc(64)), *buf = opaque(malloc(256)), *q;

	memset(p, 0x5a, 64);
	memcpy(buf, p - 64, 64 + 64 + 32);
	q = buf + 64;
	name_ptr("P", q);
	free(opaque(q));
	CHECK(malloc_usable_size(opaque(q)) == 0);
	CHECK(realloc(opaque(q), 128) == NULL);
	CHECK(all_bytes(p, 0x5a, 64) && malloc_usable_size(p) == 64);
	free(p);
	free(buf);
	return 0;
}

/*
 * Each byte of a rear guard of MD_TEST_GUARD bytes, then of the front guard
 * (as many, rounded up to 16), corrupted alone in a block of its own: the
 * guard checks see every byte, whatever the guard's length.
 */
int test_guard_every_byte(void)
{
	const char *g = getenv("MD_TEST_GUARD");
	long n = g != NULL ? atol(g) : 32, front = (n + 15) / 16 * 16;

	for (long k = 0; k < n; k++) {
		uint8_t *p = opaque(malloc(37));

		name_ptr("P", p);
		p[37 + k] ^= 0x01;
		free(p);
	}
	for (long k = 0; k < front; k++) {
		uint8_t *p = opaque(malloc(37));

		name_ptr("P", p);
		p[-1 - k] ^= 0x01;
		free(p);
	}
	return 0;
}
