// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The pointer hash of the pointer tables and of the sampler's filter. */
#ifndef MD_HASH_H
#define MD_HASH_H

#include <stdint.h>

/* md_mix64 is MurmurHash3's 64-bit finalizer: every bit of h reaches every bit. */
static inline uint64_t md_mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

#endif
