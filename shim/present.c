// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * PRESENT_BYTES of record_allocs' free and realloc lines, as Android's
 * GetPresentBytes: how many of a block's bytes are on pages resident in
 * memory (bit 63 of the page's entry in /proc/self/pagemap), the first
 * and last pages counted for the bytes of the block they hold; -1 when it
 * cannot be told. Read before the block is freed, with the library's own
 * calls only (open, pread, close: nothing allocates).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "present.h"

/* Page entries read at a time. */
#define ENTRIES 128

int64_t md_present_bytes(const void *ptr, size_t size)
{
	uintptr_t page = (uintptr_t)getpagesize(), addr = (uintptr_t)ptr, end, first, last, at;
	uint64_t entries[ENTRIES];
	int64_t present = 0;
	int fd;

	if (ptr == NULL || size == 0 || addr + size < addr)
		return -1;
	end = addr + size;
	first = addr / page;
	last = (end - 1) / page;
	/* Opened each time: a fork child must read its own. */
	fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (at = first; at <= last;) {
		size_t n = last - at + 1 > ENTRIES ? ENTRIES : last - at + 1;
		ssize_t got = pread(fd, entries, n * sizeof(entries[0]), (off_t)(at * sizeof(entries[0])));

		if (got <= 0 || (size_t)got % sizeof(entries[0]) != 0) {
			present = -1;
			break;
		}
		n = (size_t)got / sizeof(entries[0]);
		for (size_t i = 0; i < n; i++, at++) {
			uintptr_t lo = at * page, hi = lo + page;

			if (!(entries[i] >> 63))
				continue;
			lo = lo < addr ? addr : lo;
			hi = hi > end ? end : hi;
			present += (int64_t)(hi - lo);
		}
	}
	close(fd);
	return present;
}
