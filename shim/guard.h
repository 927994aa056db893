// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The block header and the front and rear guards (guard.c): the header
 * precedes every allocation when a guard is enabled, the front guard sits
 * between it and the user's bytes, the rear guard after them.
 */
#ifndef MD_GUARD_H
#define MD_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "config.h"
#include "debug.h"
#include "real.h"

#define MD_DEBUG_TAG 0x1ee7d00dU
#define MD_DEBUG_FREE_TAG 0x1cc7dccdU

/*
 * md_header precedes every allocation when a guard is enabled. check binds
 * it to its block's address (md_addr_check), so that a header copied or
 * left elsewhere does not pass for a live block's: with it the header
 * answers for TRACK_ALLOCS what the table of live blocks answers without
 * one.
 */
struct md_header {
	uint32_t tag;
	uint32_t check;
	void *orig_pointer;
	size_t size;
	size_t usable_size;
};

/* Space reserved for the header: sizeof(struct md_header) rounded to 16. */
#define MD_HEADER_SPACE 32
_Static_assert(sizeof(struct md_header) <= MD_HEADER_SPACE, "the header outgrew its space");

static inline struct md_header *md_get_header(void *ptr)
{
	return (struct md_header *)((char *)ptr - md_pointer_offset);
}

/*
 * md_addr_check is the check word of the header of the block at ptr: bits
 * 4 to 35 of the address (blocks are 16-byte aligned), so that a header
 * copied to another block's place within 64 GiB does not match.
 */
static inline uint32_t md_addr_check(const void *ptr)
{
	return (uint32_t)((uintptr_t)ptr >> 4) ^ 0x6d647368U;
}

/* md_usable_size is the usable size of a block of the debug allocator. */
static MD_INLINE size_t md_usable_size(void *ptr)
{
	if (md_header)
		return md_get_header(ptr)->usable_size;
	return md_real_usable_size(ptr);
}

/*
 * md_header_alloc allocates a block that takes a header: glibc's malloc
 * already aligns as the header needs, without memalign's extra steps.
 */
static MD_INLINE void *md_header_alloc(size_t n)
{
	if (MD_MIN_ALIGN <= _Alignof(max_align_t))
		return md_real_malloc(n);
	return md_real_memalign(MD_MIN_ALIGN, n);
}

/*
 * md_init_header writes the header at h of a block of size bytes that the
 * real allocator returned as orig, and its guards; returns the user
 * pointer, or NULL (orig freed) if the block is unusable.
 */
static MD_INLINE void *md_init_header(struct md_header *h, void *orig, size_t size)
{
	uint8_t *user = (uint8_t *)h + md_pointer_offset;

	if (md_cfg.options & MD_REAR_GUARD) {
		/* The block ends where the rear guard starts. */
		h->usable_size = size;
		md_fill_bytes(user + size, MD_REAR_GUARD_VALUE, md_cfg.rear_guard_bytes);
	} else {
		size_t usable = md_real_usable_size(orig);

		if (usable == 0) {
			md_real_free(orig);
			return NULL;
		}
		h->usable_size = usable - (md_pointer_offset + (size_t)((char *)h - (char *)orig));
	}
	h->tag = MD_DEBUG_TAG;
	h->orig_pointer = orig;
	h->size = size;
	h->check = md_addr_check(user);
	if (md_cfg.options & MD_FRONT_GUARD)
		md_fill_bytes((uint8_t *)h + MD_HEADER_SPACE, MD_FRONT_GUARD_VALUE, md_cfg.front_guard_bytes);
	return user;
}

/* md_report_guard logs a corrupted guard from its first bad byte, i. */
void md_report_guard(void *ptr, size_t size, const char *which, const uint8_t *guard, size_t len,
		     long first_index, uint8_t expected, size_t i)
	__attribute__((noinline, cold, visibility("hidden")));

/* md_check_guard checks a guard, which is almost always intact. */
static MD_INLINE void md_check_guard(void *ptr, size_t size, const char *which, const uint8_t *guard, size_t len,
				     long first_index, uint8_t expected)
{
	if (__builtin_expect(!md_all_bytes(guard, len, expected), 0))
		md_report_guard(ptr, size, which, guard, len, first_index, expected,
				md_first_bad(guard, len, expected));
}

/* md_check_guards checks the guards of the block at ptr, whose header is h: front, then rear. */
static MD_INLINE void md_check_guards(void *ptr, struct md_header *h)
{
	if (md_cfg.options & MD_FRONT_GUARD)
		md_check_guard(ptr, h->size, "FRONT", (uint8_t *)h + MD_HEADER_SPACE, md_cfg.front_guard_bytes,
			       -(long)md_cfg.front_guard_bytes, MD_FRONT_GUARD_VALUE);
	if (md_cfg.options & MD_REAR_GUARD)
		md_check_guard(ptr, h->size, "REAR", (uint8_t *)ptr + h->size, md_cfg.rear_guard_bytes,
			       (long)h->size, MD_REAR_GUARD_VALUE);
}

#endif
