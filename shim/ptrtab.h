// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Pointer tables (ptrtab.c). */
#ifndef MD_PTRTAB_H
#define MD_PTRTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * md_ptrtab maps pointers to a word (ptrtab.c): the live blocks of
 * verify_pointers and the blocks free_track holds. Lookups and updates are
 * O(1) on average; each shard has its own spin lock, taken inside the calls,
 * and its storage comes from mmap, so nothing here calls malloc. Initialize
 * a table with MD_PTRTAB_INITIALIZER. Around fork, call fork_prepare before
 * and fork_parent or fork_child after.
 */
#define MD_PTRTAB_SHARD_BITS 4
#define MD_PTRTAB_SHARDS (1 << MD_PTRTAB_SHARD_BITS)

struct md_ptrtab_slot {
	uintptr_t key; /* the pointer inverted; 0: empty */
	uintptr_t value;
};

struct md_ptrtab_shard {
	int lock; /* a spin lock: 0 free, 1 held */
	struct md_ptrtab_slot *slots;
	size_t cap; /* a power of two, or 0 before the first put */
	size_t count;
};

struct md_ptrtab {
	struct md_ptrtab_shard shards[MD_PTRTAB_SHARDS];
};

#define MD_PTRTAB_INITIALIZER \
	{ .shards = { [0 ... MD_PTRTAB_SHARDS - 1] = { .lock = 0 } } }

/* md_ptrtab_put adds ptr or updates its value; false if there was no memory for it. */
bool md_ptrtab_put(struct md_ptrtab *t, const void *ptr, uintptr_t value);

/* md_ptrtab_get reports whether ptr is in the table and, if value is not NULL, its value. */
bool md_ptrtab_get(struct md_ptrtab *t, const void *ptr, uintptr_t *value);

/* md_ptrtab_take is md_ptrtab_get that also removes ptr, in the same step. */
bool md_ptrtab_take(struct md_ptrtab *t, const void *ptr, uintptr_t *value);

void md_ptrtab_fork_prepare(struct md_ptrtab *t);
void md_ptrtab_fork_parent(struct md_ptrtab *t);
void md_ptrtab_fork_child(struct md_ptrtab *t);

#endif
