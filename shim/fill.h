// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* fill_on_alloc and fill_on_free: the fills of a block's usable bytes. */
#ifndef MD_FILL_H
#define MD_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "config.h"
#include "debug.h"
#include "guard.h"

/* md_fill_alloc fills a new block from byte from on, up to fill_on_alloc's bytes. */
static MD_INLINE void md_fill_alloc(void *ptr, size_t from)
{
	size_t bytes = md_min_size(md_usable_size(ptr), md_cfg.fill_on_alloc_bytes);

	if (bytes > from)
		md_fill_bytes((uint8_t *)ptr + from, MD_FILL_ALLOC_VALUE, bytes - from);
}

/* md_fill_free fills a freed block of bytes usable bytes, up to fill_on_free's bytes. */
static MD_INLINE void md_fill_free(void *ptr, size_t bytes)
{
	md_fill_bytes(ptr, MD_FILL_FREE_VALUE, md_min_size(bytes, md_cfg.fill_on_free_bytes));
}

#endif
