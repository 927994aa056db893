// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The debug allocator's own calls (mdshim.c). */
#ifndef MD_DEBUG_H
#define MD_DEBUG_H

/*
 * md_internal_begin and md_internal_end bracket the library's own use of
 * code that may allocate (stdio, dlsym): calls made in between go straight
 * to glibc and are neither checked nor reported. They nest.
 */
void md_internal_begin(void);
void md_internal_end(void);

#endif
