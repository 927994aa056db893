// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Runs of one byte value, the guards and the fills: writing them and
 * checking them.
 *
 * Guards and fills are short runs of one byte value: a few 16-byte loads or
 * stores cover them without a call or a loop, the last ones overlapping.
 * Runs of over 128 bytes take a loop (checks) or memset (fills).
 */
#ifndef MD_BYTES_H
#define MD_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint8_t md_v16 __attribute__((vector_size(16), aligned(1), may_alias));

#define MD_RUN_SHORT 128

/* md_fill_bytes is memset(dst, v, n), quicker for the short runs of guards and fills. */
static inline __attribute__((always_inline)) void md_fill_bytes(void *dst, uint8_t v, size_t n)
{
	md_v16 x = (md_v16){ 0 } + v;
	uint8_t *p = dst, *e = p + n;

	if (n < 16 || n > MD_RUN_SHORT) {
		memset(p, v, n);
		return;
	}
	if (n > 64) {
		*(md_v16 *)(p + 32) = x;
		*(md_v16 *)(p + 48) = x;
		*(md_v16 *)(e - 64) = x;
		*(md_v16 *)(e - 48) = x;
	}
	if (n > 32) {
		*(md_v16 *)(p + 16) = x;
		*(md_v16 *)(e - 32) = x;
	}
	*(md_v16 *)p = x;
	*(md_v16 *)(e - 16) = x;
}

/* md_first_bad returns the index of the first byte of p[0..len) that is not v, or len. */
static inline size_t md_first_bad(const uint8_t *p, size_t len, uint8_t v)
{
	uint64_t pattern = 0x0101010101010101ULL * v, w;
	size_t i = 0;

	/* Eight bytes at a time, the common case being an intact guard. */
	for (; i + 8 <= len; i += 8) {
		memcpy(&w, p + i, sizeof(w));
		if (w != pattern)
			break;
	}
	for (; i < len; i++)
		if (p[i] != v)
			break;
	return i;
}

/* md_all_bytes reports whether p[0..n) are all v, quicker for the short runs of guards. */
static inline __attribute__((always_inline)) bool md_all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	md_v16 x = (md_v16){ 0 } + v, d;
	const uint8_t *e = p + n;
	uint64_t w[2];

	if (n < 16 || n > MD_RUN_SHORT)
		return md_first_bad(p, n, v) == n;
	d = (*(const md_v16 *)p ^ x) | (*(const md_v16 *)(e - 16) ^ x);
	if (n > 32)
		d |= (*(const md_v16 *)(p + 16) ^ x) | (*(const md_v16 *)(e - 32) ^ x);
	if (n > 64)
		d |= (*(const md_v16 *)(p + 32) ^ x) | (*(const md_v16 *)(p + 48) ^ x) |
		     (*(const md_v16 *)(e - 64) ^ x) | (*(const md_v16 *)(e - 48) ^ x);
	memcpy(w, &d, sizeof(w));
	return (w[0] | w[1]) == 0;
}

#endif
