// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* PRESENT_BYTES of record_allocs (present.c). */
#ifndef MD_PRESENT_H
#define MD_PRESENT_H

#include <stddef.h>
#include <stdint.h>

/* md_present_bytes returns how many of the size bytes at ptr are resident, or -1. */
int64_t md_present_bytes(const void *ptr, size_t size) __attribute__((visibility("hidden")));

#endif
