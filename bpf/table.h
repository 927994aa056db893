/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The live table of allocations, and its operations: the probes and user
 * space (tracer/tables.go) put blocks in, find them and take them out.
 */
#ifndef MDTRACE_TABLE_H
#define MDTRACE_TABLE_H

#include "common.h"

/*
 * The live table: tiers of buckets of 16 slots, 32 bytes a slot. A block
 * has two buckets in a tier, picked by two hashes of its key, and goes into
 * the emptier of the two; a lookup reads both. Two choices keep the buckets
 * even: a tier is full when both buckets of a new block are, once 85-90%
 * of its slots are used. A BPF hash map took 108 bytes of kernel memory
 * for each block (its 96-byte element and the memory cgroup's 8 bytes per
 * slab object) and 16 bytes of buckets for each block of room.
 *
 * A bucket keeps its pointers together, so that a lookup reads two cache
 * lines of a bucket and the rest only where a pointer matches. The tiers
 * are arrays that user space maps into its memory: it reads the table
 * without a system call, and copies or drops blocks with the same steps as
 * the probes.
 *
 * A slot's pointer says its state: 0 free, SLOT_BUSY while one probe (or
 * user space) fills it in or empties it, else the block's address, set
 * last. A slot is taken by a compare-and-swap from 0 to SLOT_BUSY and given
 * back by one from the address to SLOT_BUSY: one taker, one giver, and a
 * reader that sees an address sees the rest of the entry as it was written.
 * BUCKET_SLOTS, SLOT_BUSY and TABLE_TIERS are mdtrace's too: they are in
 * abi/mdtrace_abi.h.
 */
struct bucket {
	u64 ptr[BUCKET_SLOTS];
	u32 tgid[BUCKET_SLOTS];
	u32 gen[BUCKET_SLOTS];
	struct alloc_info info[BUCKET_SLOTS];
};

/*
 * New blocks go into the tier in use, top_table, until both buckets of a
 * block are full, then into the next. When the tier in use gets full
 * enough that the emptier bucket of a block holds tier_filling_at[tier]
 * slots, user space is told, and makes the next tier ahead of need
 * (tracer/tables.go).
 */
#define DEFAULT_TABLE_BUCKETS 4096

struct alloc_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, DEFAULT_TABLE_BUCKETS);
	__type(key, u32);
	__type(value, struct bucket);
};

/* The first tier, made with the other maps; user space puts it in tables. */
struct alloc_table allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, TABLE_TIERS);
	__type(key, u32);
	__array(values, struct alloc_table);
} tables SEC(".maps");

/*
 * The buckets of each tier, and how many slots of the emptier bucket of a
 * block say the tier is getting full: set by user space before it puts the
 * tier in tables.
 */
volatile u32 tier_buckets[TABLE_TIERS];
volatile u32 tier_filling_at[TABLE_TIERS];

/*
 * The live table's occupancy bitmap: OCC_WORDS words for each tier, a bit
 * for each run of its buckets that may hold an entry (occ_bit, with the
 * tier's occ_mult, which user space sets before it puts the tier in
 * tables). The probes set a bucket's bit after they take a slot of it;
 * user space maps the bitmap into its memory, walks only the runs whose
 * bit is set, and clears the bits of runs it finds empty
 * (tracer/tables.go).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TABLE_TIERS * OCC_WORDS);
	__type(key, u32);
	__type(value, u64);
} table_occ SEC(".maps");

volatile u64 tier_occ_mult[TABLE_TIERS];

/* The tier of the live table new blocks go into: the probes move it on. */
volatile u64 top_table = 0;

/* A bit per tier the probes said is getting full. */
volatile u64 tier_filling = 0;

/* The blocks in each tier, on each CPU: user space adds them up. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TABLE_TIERS);
	__type(key, u32);
	__type(value, s64);
} tier_blocks SEC(".maps");

/*
 * Tier events for user space: the number of a tier the probes moved on to,
 * or TIER_EVENT_FILLING and the number of the tier in use getting full. One
 * of each at most per tier is ever sent.
 */
#define TIER_EVENT_FILLING 0x100
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} tier_moves SEC(".maps");

/* Tier t of the live table, or null. */
static __always_inline void *table(u32 t)
{
	return bpf_map_lookup_elem(&tables, &t);
}

/* The two buckets of a block in a tier of n buckets (table_buckets). */
static __always_inline void buckets_of(const struct alloc_key *key, u32 n, u32 b[2])
{
	table_buckets(key->ptr, key->tgid, n, b);
}

/*
 * The two buckets of a block in tier t, and, if at is not null, the tier's
 * tier_filling_at; false if the tier is not made.
 */
static __always_inline bool tier_buckets_of(u32 t, const struct alloc_key *key, u32 b[2], u32 *at)
{
	u32 n;

	/* The compiler may know t < TABLE_TIERS: the verifier must see it. */
	barrier_var(t);
	if (t >= TABLE_TIERS)
		return false;
	n = tier_buckets[t];
	if (n < 2)
		return false;
	buckets_of(key, n, b);
	if (at)
		*at = tier_filling_at[t];
	return true;
}

/* Where a block's entry is: a tier, a bucket of it and a slot. */
struct place {
	struct bucket *bk;
	u32 tier;
	u32 slot;
};

static __always_inline void add_blocks(u32 t, s64 n)
{
	s64 *c = bpf_map_lookup_elem(&tier_blocks, &t);

	if (c)
		__sync_fetch_and_add(c, n);
}

/*
 * The table's operations are functions of their own, which the verifier
 * checks once, instead of at each call in every program: their loops over
 * tiers, buckets and slots, checked along every path through them, would
 * take it past its limit.
 */

/*
 * Whether slot j of bucket bk, whose pointer matches key's, holds key's
 * block: the pointer alone matches most of the time, and only then are the
 * process and gen read.
 */
static __always_inline bool slot_is(const struct bucket *bk, u32 j, const struct alloc_key *key)
{
	return bk->tgid[j] == key->tgid && bk->gen[j] == key->gen;
}

/*
 * Looks for key in bucket bk: its slot, or BUCKET_SLOTS plus the number of
 * slots in use. Every insertion scans two buckets whole, the most of a
 * batch's work per event: the loop is unrolled and has no branch. The
 * slots whose pointer matches key's are a bit each of match, and a slot in
 * use counts one, ((p | -p) >> 63 is 1 for any p but 0). Only then are the
 * matching slots looked at, the block's own nearly always. A branch per
 * slot, as a loop that returns at the match has, made paths that older
 * kernels' verifier (6.1) checked by the hundred thousand.
 */
__noinline int bucket_scan(struct bucket *bk, const struct alloc_key *key)
{
	u64 kp, p, x, u;
	u32 j, match = 0;
	int used = 0;

	if (!bk || !key)
		return 2 * BUCKET_SLOTS;
	kp = key->ptr;
#pragma unroll
	for (j = 0; j < BUCKET_SLOTS; j++) {
		p = bk->ptr[j];
		x = p ^ kp;
		x |= 0 - x;
		u = p | (0 - p);
		/* The barriers keep clang from making each test a branch again. */
		barrier_var(x);
		barrier_var(u);
		match |= (u32)((x >> 63) ^ 1) << j;
		used += u >> 63;
	}
	if (match) {
		for (j = 0; j < BUCKET_SLOTS; j++) {
			if (((match >> j) & 1) && slot_is(bk, j, key))
				return j;
		}
	}
	return BUCKET_SLOTS + used;
}

/* Looks for key in bucket bk: its slot, or BUCKET_SLOTS. */
__noinline int bucket_find(struct bucket *bk, const struct alloc_key *key)
{
	u64 kp;
	int j;

	if (!bk || !key)
		return BUCKET_SLOTS;
	kp = key->ptr;
#pragma unroll
	for (j = 0; j < BUCKET_SLOTS; j++) {
		if (bk->ptr[j] == kp && slot_is(bk, j, key))
			return j;
	}
	return BUCKET_SLOTS;
}

/* Finds key in tier t, table m. */
static __always_inline bool find_in(void *m, u32 t, const struct alloc_key *key, struct place *pl)
{
	u32 b[2], i;
	int j;

	if (!tier_buckets_of(t, key, b, 0))
		return false;
	for (i = 0; i < 2; i++) {
		struct bucket *bk = bpf_map_lookup_elem(m, &b[i]);

		if (!bk)
			continue;
		j = bucket_find(bk, key);
		if (j >= BUCKET_SLOTS)
			continue;
		pl->bk = bk;
		pl->tier = t;
		pl->slot = j;
		return true;
	}
	return false;
}

/*
 * Runs the statement that follows for each tier of the live table that is
 * made, from the one in use down, with m the tier and t its number.
 */
#define FOR_EACH_TIER(m, t)                                                       \
	for (u32 top_ = top_table, i_ = 0; i_ < TABLE_TIERS && i_ <= top_; i_++) \
		if (((t) = top_ - i_, (m) = table(t)) != 0)

/* Whether a block is in the live table, the newest tier looked at first. */
__noinline int table_find(const struct alloc_key *key)
{
	struct place pl;
	void *m;
	u32 t;

	if (!key)
		return 0;
	FOR_EACH_TIER(m, t) {
		if (find_in(m, t, key, &pl))
			return 1;
	}
	return 0;
}

/*
 * Gives back the slot of key at pl, after copying its entry to old if old
 * is not null. False when another CPU gave it back first.
 */
static __always_inline bool take_out(struct place *pl, const struct alloc_key *key, struct alloc_info *old)
{
	u32 j = pl->slot & (BUCKET_SLOTS - 1);

	if (__sync_val_compare_and_swap(&pl->bk->ptr[j], key->ptr, SLOT_BUSY) != key->ptr)
		return false;
	if (old)
		*old = pl->bk->info[j];
	pl->bk->tgid[j] = 0;
	barrier();
	pl->bk->ptr[j] = 0;
	add_blocks(pl->tier, -1);
	return true;
}

/*
 * Deletes a live block from the tier that holds it, newest first, after
 * copying its entry to old. Returns 0, or -1 when no tier holds it.
 */
__noinline int table_delete(const struct alloc_key *key, struct alloc_info *old)
{
	struct place pl;
	void *m;
	u32 t;

	if (!key || !old)
		return -1;
	FOR_EACH_TIER(m, t) {
		if (find_in(m, t, key, &pl))
			return take_out(&pl, key, old) ? 0 : -1;
	}
	return -1;
}

/* Deletes a live block, after copying its entry to old if old is not null. */
static __always_inline int delete_block(const struct alloc_key *key, struct alloc_info *old)
{
	struct alloc_info entry;

	if (table_delete(key, &entry) != 0)
		return -1;
	if (old)
		*old = entry;
	return 0;
}

/* Takes a free slot of bk for key: 1, or 0 when there is none. */
__noinline int bucket_claim(struct bucket *bk, const struct alloc_key *key, const struct alloc_info *info)
{
	u32 j;

	if (!bk || !key || !info)
		return 0;
	for (j = 0; j < BUCKET_SLOTS; j++) {
		if (bk->ptr[j] != 0 || __sync_val_compare_and_swap(&bk->ptr[j], 0, SLOT_BUSY) != 0)
			continue;
		bk->tgid[j] = key->tgid;
		bk->gen[j] = key->gen;
		bk->info[j] = *info;
		barrier();
		bk->ptr[j] = key->ptr;
		return 1;
	}
	return 0;
}

/*
 * Sets the occupancy bit of bucket b of tier t, after a slot of it was
 * taken. The load of the word comes after the compare-and-swap that took
 * the slot, a full barrier: user space, which clears a bit and then reads
 * its run's slots again, either sees the slot taken or has cleared the bit
 * before this load, which then sets it again. The atomic is only for a
 * bit found clear, which is rare: once per run until user space clears
 * it.
 */
static __always_inline void occ_mark(u32 t, u32 b)
{
	u32 bit, i;
	u64 *w, m;

	/* The compiler may know t < TABLE_TIERS: the verifier must see it. */
	barrier_var(t);
	if (t >= TABLE_TIERS)
		return;
	bit = occ_bit(b, tier_occ_mult[t]);
	i = t * OCC_WORDS + bit / 64;
	w = bpf_map_lookup_elem(&table_occ, &i);
	if (!w)
		return;
	m = 1ULL << (bit & 63);
	if (!(*(volatile u64 *)w & m))
		__sync_fetch_and_or(w, m);
}

/* Sends a tier event to user space. */
static __always_inline void tier_event(u64 what)
{
	u64 *e = bpf_ringbuf_reserve(&tier_moves, sizeof(*e), 0);

	if (e) {
		*e = what;
		bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	}
}

#define E2BIG 7
#define EEXIST 17

/*
 * Puts a block into tier t, table m: over the entry the tier holds for it
 * (unless flags is BPF_NOEXIST: -EEXIST), else into the emptier of its two
 * buckets. Returns 0, or -E2BIG when both are full.
 */
static __always_inline int place(void *m, u32 t, const struct alloc_key *key, const struct alloc_info *info,
				 u64 flags)
{
	struct bucket *bk[2];
	u32 b[2], at;
	int found[2], used;

	if (!tier_buckets_of(t, key, b, &at))
		return -E2BIG;
	bk[0] = bpf_map_lookup_elem(m, &b[0]);
	bk[1] = bpf_map_lookup_elem(m, &b[1]);
	if (!bk[0] || !bk[1])
		return -E2BIG;
	found[0] = bucket_scan(bk[0], key);
	/*
	 * An empty first bucket is the emptier, or as empty, whatever the
	 * second holds: the second is only looked in for the block, without
	 * a count. Most buckets are empty until a tier fills.
	 */
	if (found[0] == BUCKET_SLOTS) {
		found[1] = bucket_find(bk[1], key);
		if (found[1] >= BUCKET_SLOTS)
			found[1] = 2 * BUCKET_SLOTS;
	} else {
		found[1] = bucket_scan(bk[1], key);
	}
	for (int i = 0; i < 2; i++) {
		if (found[i] >= BUCKET_SLOTS)
			continue;
		if (flags == BPF_NOEXIST)
			return -EEXIST;
		bk[i]->info[found[i] & (BUCKET_SLOTS - 1)] = *info;
		return 0;
	}
	used = found[0] - BUCKET_SLOTS;
	if (found[1] < found[0]) {
		struct bucket *x = bk[0];
		u32 y = b[0];

		bk[0] = bk[1];
		bk[1] = x;
		b[0] = b[1];
		b[1] = y;
		used = found[1] - BUCKET_SLOTS;
	}
	if (used >= at && !(tier_filling & (1ULL << t))) {
		u64 was = tier_filling;

		if (!(was & (1ULL << t)) &&
		    __sync_val_compare_and_swap(&tier_filling, was, was | (1ULL << t)) == was)
			tier_event(TIER_EVENT_FILLING | t);
	}
	/* Marked once, whichever bucket took it: fewer paths to verify. */
	if (!bucket_claim(bk[0], key, info)) {
		if (!bucket_claim(bk[1], key, info))
			return -E2BIG;
		b[0] = b[1];
	}
	occ_mark(t, b[0]);
	add_blocks(t, 1);
	return 0;
}

/*
 * Puts a live block into the newest tier. An entry an older tier still
 * holds for its address, whose free mdtrace missed, goes: the newest entry
 * is the block, as when one table held them all. With BPF_NOEXIST an entry
 * the newest tier holds for it stays, else it is overwritten. When the
 * newest tier has no room for the block and user space has made the next
 * one, that one becomes the newest. Returns 0, -EEXIST or -E2BIG.
 */
__noinline int put_block(const struct alloc_key *key, const struct alloc_info *info, u64 flags)
{
	u32 top = top_table, i;
	struct place pl;
	void *m, *next;
	int err;

	if (!key || !info)
		return -E2BIG;
	for (i = 0; i < TABLE_TIERS - 1; i++) {
		if (i >= top)
			break;
		m = table(i);
		if (m && find_in(m, i, key, &pl))
			take_out(&pl, key, 0);
	}
	if (top >= TABLE_TIERS)
		return -E2BIG;
	m = table(top);
	if (!m)
		return -E2BIG;
	err = place(m, top, key, info, flags);
	if (err != -E2BIG || top + 1 >= TABLE_TIERS)
		return err;
	next = table(top + 1);
	if (!next)
		return -E2BIG;
	/* Another CPU may have moved on already: top_table only grows. */
	if (__sync_val_compare_and_swap(&top_table, top, top + 1) == top)
		tier_event(top + 1);
	return place(next, top + 1, key, info, flags);
}

#endif /* MDTRACE_TABLE_H */
