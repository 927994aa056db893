// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Pointer tables: hash maps from a pointer to a word, for the live blocks of
 * verify_pointers (TRACK_ALLOCS) when blocks have no header, and for the
 * blocks free_track holds.
 *
 * A table is MD_PTRTAB_SHARDS shards, picked by the top bits of a pointer's
 * hash, each an open-addressing array with linear probing under its own
 * spin lock (spin.h), so threads working on different pointers seldom wait
 * for each other: the critical sections are a few dozen instructions (but
 * for a rehash). A removal shifts the entries after it back, so there are no tombstones and
 * a lookup stops at the first empty slot. A shard doubles, rehashing, when
 * it gets half full; it never shrinks. The arrays come from mmap, never from
 * malloc, so the tables work inside the allocator.
 *
 * Keys are stored inverted, as Android's PointerData stores them, so that a
 * scan of memory for pointers does not find the table's keys; an inverted
 * pointer is never 0, which marks an empty slot.
 */
#include <sys/mman.h>

#include "../abi/mdtrace_abi.h"
#include "ptrtab.h"
#include "spin.h"

/* Slots in a shard's first array: one page. */
#define MIN_CAP (4096 / sizeof(struct md_ptrtab_slot))

static uint64_t hash_ptr(uintptr_t p)
{
	return mix64((uint64_t)p);
}

static struct md_ptrtab_shard *shard_of(struct md_ptrtab *t, uint64_t h)
{
	return &t->shards[h >> (64 - MD_PTRTAB_SHARD_BITS)];
}

/* probe returns the slot holding key, or the empty slot that ends its run. */
static size_t probe(const struct md_ptrtab_shard *s, uintptr_t key, uint64_t h)
{
	size_t mask = s->cap - 1;
	size_t i = (size_t)h & mask;

	while (s->slots[i].key != 0 && s->slots[i].key != key)
		i = (i + 1) & mask;
	return i;
}

/* grow doubles the shard's array (or makes its first one) and rehashes into it. */
static bool grow(struct md_ptrtab_shard *s)
{
	size_t old_cap = s->cap, cap = old_cap != 0 ? old_cap * 2 : MIN_CAP;
	struct md_ptrtab_slot *old = s->slots, *slots;
	void *p;

	if (cap > SIZE_MAX / 2 / sizeof(*slots))
		return false;
	p = mmap(NULL, cap * sizeof(*slots), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return false;
	slots = p;
	s->slots = slots;
	s->cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].key != 0)
			slots[probe(s, old[i].key, hash_ptr(~old[i].key))] = old[i];
	if (old != NULL)
		munmap(old, old_cap * sizeof(*old));
	return true;
}

/* remove_at empties slot hole, moving back the entries of the run after it. */
static void remove_at(struct md_ptrtab_shard *s, size_t hole)
{
	size_t mask = s->cap - 1, j = hole;

	for (;;) {
		size_t home;

		j = (j + 1) & mask;
		if (s->slots[j].key == 0)
			break;
		home = (size_t)hash_ptr(~s->slots[j].key) & mask;
		/* The entry may fill the hole if the hole lies on its probe path, home to j. */
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			s->slots[hole] = s->slots[j];
			hole = j;
		}
	}
	s->slots[hole].key = 0;
	s->slots[hole].value = 0;
	s->count--;
}

bool md_ptrtab_put(struct md_ptrtab *t, const void *ptr, uintptr_t value)
{
	uintptr_t key = ~(uintptr_t)ptr;
	uint64_t h = hash_ptr((uintptr_t)ptr);
	struct md_ptrtab_shard *s = shard_of(t, h);
	bool ok = true;
	size_t i;

	md_spin_lock(&s->lock);
	/* If the array cannot grow, it takes entries until one slot is left empty. */
	if ((s->count + 1) * 2 > s->cap && !grow(s) && s->count + 1 >= s->cap) {
		ok = false;
	} else {
		i = probe(s, key, h);
		if (s->slots[i].key == 0) {
			s->slots[i].key = key;
			s->count++;
		}
		s->slots[i].value = value;
	}
	md_spin_unlock(&s->lock);
	return ok;
}

/* lookup finds ptr; with take it also removes it. */
static bool lookup(struct md_ptrtab *t, const void *ptr, uintptr_t *value, bool take)
{
	uintptr_t key = ~(uintptr_t)ptr;
	uint64_t h = hash_ptr((uintptr_t)ptr);
	struct md_ptrtab_shard *s = shard_of(t, h);
	bool found = false;
	size_t i;

	md_spin_lock(&s->lock);
	if (s->cap != 0) {
		i = probe(s, key, h);
		if (s->slots[i].key == key) {
			found = true;
			if (value != NULL)
				*value = s->slots[i].value;
			if (take)
				remove_at(s, i);
		}
	}
	md_spin_unlock(&s->lock);
	return found;
}

bool md_ptrtab_get(struct md_ptrtab *t, const void *ptr, uintptr_t *value)
{
	return lookup(t, ptr, value, false);
}

bool md_ptrtab_take(struct md_ptrtab *t, const void *ptr, uintptr_t *value)
{
	return lookup(t, ptr, value, true);
}

void md_ptrtab_fork_prepare(struct md_ptrtab *t)
{
	for (size_t i = 0; i < MD_PTRTAB_SHARDS; i++)
		md_spin_lock(&t->shards[i].lock);
}

void md_ptrtab_fork_parent(struct md_ptrtab *t)
{
	for (size_t i = MD_PTRTAB_SHARDS; i-- > 0;)
		md_spin_unlock(&t->shards[i].lock);
}

void md_ptrtab_fork_child(struct md_ptrtab *t)
{
	for (size_t i = 0; i < MD_PTRTAB_SHARDS; i++)
		t->shards[i].lock = 0;
}
