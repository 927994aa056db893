// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * free_track: use after free, double free, its exit checks (md_test.c runs
 * them).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md_test.h"

int test_free_track_use_after_free(void)
{
	uint8_t *pointers[5], *large1, *large2;
	char name[8];

	for (int i = 0; i < 5; i++) {
		pointers[i] = opaque(malloc(100 + (size_t)i));
		snprintf(name, sizeof(name), "P%d", i);
		name_ptr(name, pointers[i]);
		memset(pointers[i], 0, 100 + (size_t)i);
		free(pointers[i]);
	}
	pointers[0][20] = 0xaf;
	pointers[0][99] = 0x12;
	pointers[3][3] = 0x34;

	large1 = opaque(malloc(8192));
	name_ptr("L1", large1);
	memset(large1, 0, 8192);
	free(large1);
	large1[4095] = 0x90;
	large1[4100] = 0x56;
	large1[8191] = 0x00;

	large2 = opaque(malloc(9000));
	name_ptr("L2", large2);
	memset(large2, 0, 9000);
	free(large2);
	large2[8200] = 0x78;

	for (int i = 0; i < 10; i++)
		free(opaque(malloc(100 + (size_t)i)));
	fprintf(stderr, "done\n");
	return 0;
}

int test_free_track_finalize(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	p[10] = 0x01;
	p[50] = 0x02;
	fprintf(stderr, "exiting\n");
	return 0;
}

int test_free_track_double_free(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	free(p);
	return 0;
}

int test_free_track_realloc_freed(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	CHECK(realloc(p, 200) == NULL);
	return 0;
}

int test_free_track_header_tag_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	free(p);
	p[-32] = 0x00;
	return 0;
}

int test_free_track_modified_partial(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	free(p);
	memset(p, 0, 100);
	for (int i = 0; i < 4; i++)
		free(opaque(malloc(100)));
	return 0;
}

/* A double free whose block free_track later evicts: it must reach glibc only once. */
int test_free_track_double_free_churn(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	free(p);
	for (int i = 0; i < 300; i++)
		free(opaque(malloc(100)));
	fprintf(stderr, "done\n");
	return 0;
}
