/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The shim's batches: the allocations and frees a thread hands over a
 * buffer at a time, applied to the live table, and drained when the thread
 * ends.
 */
#ifndef MDTRACE_BATCH_H
#define MDTRACE_BATCH_H

#include "common.h"
#include "table.h"
#include "stack.h"
#include "alloc.h"

/*
 * Batches (shim/batch.c): a thread of a shim without checks hands over its
 * allocations and frees a buffer at a time. The layout of a buffer, struct
 * md_batch, its events and the flags of a hand-over (BATCH_*) are in
 * abi/mdtrace_abi.h.
 */

/*
 * A thread's copy of its batch, and where the batch is in its memory. The
 * words beyond a batch's end let an event's frames be read, and stored as
 * a backtrace, from any offset a mask allows.
 */
struct batch_space {
	u64 addr;
	u64 seq;	/* the sequence word of the last batch applied */
	u64 seq_addr;	/* and where that batch is */
	/*
	 * While a batch is applied: its process's part of a block's key,
	 * the zygote flag of its blocks, and the counts added at its end.
	 */
	u32 tgid, gen;
	u64 zygote;
	s64 allocs, frees, unknown, early, truncated, stopped;
	/*
	 * The batch's last frames (last_nr 0: none yet), at word last_f, cut
	 * or not, and their stack id (0: not taken).
	 */
	u64 last_id, last_cut;
	u32 last_f, last_nr;
	u64 hdr[2];	/* a batch's header, read with its words */
	u64 w[2 * (BATCH_MASK + 1)];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct batch_space);
} batch_spaces SEC(".maps");

/*
 * The threads with a batch, for mdtrace, which reads the batches of a
 * process whose report it writes (tracer/batch.go): tid to process and
 * address.
 */
struct batch_thread {
	u32 tgid;
	u32 pad;
	u64 addr;
};

#define MAX_BATCH_THREADS 16384
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_BATCH_THREADS);
	__type(key, u32);
	__type(value, struct batch_thread);
} batch_threads SEC(".maps");

/* Names struct batch_thread in BTF, so that Go gets the type. */
const struct batch_thread unused_batch_thread __attribute__((unused)) = {};

/*
 * Frees of blocks the table did not hold when their batch came, with the
 * epoch of that batch: the block's allocation may be in another thread's
 * batch that comes later. An allocation of the same block written before
 * that epoch cancels against it; one written after is a new block. The
 * value holds, above KEPT_ONE, how many frees it stands for.
 */
#define MAX_ORPHANS 16384
struct kept_free {
	u64 val;
	/*
	 * The entry's own key: an entry deleted while another CPU held a
	 * pointer to it may come back as another key's, and a change made
	 * through that pointer is undone.
	 */
	struct alloc_key key;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_ORPHANS);
	__type(key, struct alloc_key);
	__type(value, struct kept_free);
} orphans SEC(".maps");

/*
 * The processes whose shim mdtrace loaded (--inject): where, in each, the
 * shim counts the allocations its batches hold (abi/mdtrace_abi.h,
 * INJECT_PENDING_BITS). Set by mdtrace.
 */
#define MAX_INJECTED 64
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_INJECTED);
	__type(key, u32);
	__type(value, u64);
} inject_pending SEC(".maps");

/*
 * The newest epoch of a kept free: an allocation written at or after it
 * cannot cancel against any, and does not look. last_epoch is the newest
 * epoch of a batch.
 */
volatile u64 orphan_epoch = 0;
volatile u64 last_epoch = 0;
/*
 * The batches drained at their threads' ends so far: mdtrace reads a
 * process's batches, then the table; a drain in between changes both.
 */
volatile u64 batches_drained = 0;

/*
 * An index into a batch space's words, masked where the verifier sees it:
 * the compiler would drop a mask it can prove changes nothing.
 */
static __always_inline u32 masked(u32 i, const u32 mask)
{
	asm volatile("%[i] &= %[m]" : [i] "+r"(i) : [m] "i"(mask));
	return i;
}

/*
 * A free and an allocation of one block, handed over in two threads'
 * batches at the same time, must find each other: each side first makes
 * itself seen (the free its kept entry, the allocation its block in the
 * table), then, past a full barrier, looks for the other. Whoever deletes
 * the kept free accounts for the pair.
 *
 * A word per CPU for full_barrier's atomic add: no other CPU touches it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} fences SEC(".maps");

static __always_inline void full_barrier(void)
{
	u32 zero = 0;
	u64 *f = bpf_map_lookup_elem(&fences, &zero);

	if (f)
		__sync_fetch_and_add(f, 1);
}

/*
 * Raises *v to at least epoch, with other CPUs raising it too: a plain
 * compare and store could lower it.
 */
static __always_inline void raise_epoch(volatile u64 *v, u64 epoch)
{
	u64 cur;
	int i;

	for (i = 0; i < 8; i++) {
		cur = *v;
		if (cur >= epoch || __sync_val_compare_and_swap(v, cur, epoch) == cur)
			return;
	}
}

/* The pair of a kept free and its block's allocation is accounted for. */
static __always_inline void pair_matched(struct batch_space *sp)
{
	sp->unknown--;
	sp->frees++;
	sp->early++;
}

/*
 * A block's address can have more than one kept free: freed in one batch
 * while its allocation waits in another, given back, allocated again in a
 * third thread and freed in a fourth before either allocation came. Each
 * is kept under the block's key with a way number in the address's low
 * bits, which an allocation's address never has.
 */

static __always_inline struct alloc_key orphan_key(const struct alloc_key *key, u32 way)
{
	struct alloc_key k = *key;

	k.ptr |= way;
	return k;
}

static __always_inline struct alloc_key batch_key(const struct batch_space *sp, u64 ptr)
{
	struct alloc_key key = {
		.tgid = sp->tgid,
		.gen = sp->gen,
		.ptr = ptr,
	};

	return key;
}

/* The epoch of a kept free's value (abi/mdtrace_abi.h, KEPT_ONE). */
static __always_inline u64 kept_epoch(u64 v)
{
	return v & (KEPT_ONE - 1);
}

static __always_inline u64 kept_value(const struct kept_free *v)
{
	return *(volatile const u64 *)&v->val;
}

/* Whether entry v is still k's. */
static __always_inline bool kept_is(const struct kept_free *v, const struct alloc_key *k)
{
	return *(volatile const u64 *)&v->key.ptr == k->ptr && *(volatile const u32 *)&v->key.tgid == k->tgid &&
	       *(volatile const u32 *)&v->key.gen == k->gen;
}

/*
 * Takes one free back from the kept entry k, which goes with its last.
 * False when none is left: another CPU took it meanwhile.
 */
static __always_inline bool take_one(const struct alloc_key *k)
{
	struct kept_free *v;
	u64 old, left;
	int i;

	for (i = 0; i < 8; i++) {
		v = bpf_map_lookup_elem(&orphans, k);
		if (!v || !kept_is(v, k))
			return false;
		old = kept_value(v);
		if (old < KEPT_ONE)
			return false;
		left = old < 2 * KEPT_ONE ? 0 : old - KEPT_ONE;
		if (__sync_val_compare_and_swap(&v->val, old, left) != old)
			continue;
		if (!kept_is(v, k)) {
			/* Another key's entry now: what was taken goes back. */
			if (left == 0)
				__sync_val_compare_and_swap(&v->val, 0, old);
			else
				__sync_fetch_and_add(&v->val, KEPT_ONE);
			continue;
		}
		/* Marked gone first: nothing joins it any more. */
		if (left == 0)
			bpf_map_delete_elem(&orphans, k);
		return true;
	}
	return false;
}

/*
 * The free, in epoch, of an address whose ways are all taken joins the
 * address's newest kept free: out is that entry's key. False when none
 * can take it.
 */
static __always_inline bool join_newest(const struct alloc_key *key, u64 epoch, struct alloc_key *out)
{
	struct alloc_key k;
	struct kept_free *v;
	u64 old, joined, newest = 0;
	u32 way, best = ORPHAN_WAYS;
	int i;

	for (way = 0; way < ORPHAN_WAYS; way++) {
		k = orphan_key(key, way);
		v = bpf_map_lookup_elem(&orphans, &k);
		if (!v)
			continue;
		old = kept_value(v);
		if (old >= KEPT_ONE && (best == ORPHAN_WAYS || kept_epoch(old) >= newest)) {
			newest = kept_epoch(old);
			best = way;
		}
	}
	if (best == ORPHAN_WAYS)
		return false;
	*out = orphan_key(key, best);
	for (i = 0; i < 8; i++) {
		v = bpf_map_lookup_elem(&orphans, out);
		if (!v || !kept_is(v, out))
			return false;
		old = kept_value(v);
		/* Gone meanwhile, or standing for as many frees as it can. */
		if (old < KEPT_ONE || old >= 0xffff * KEPT_ONE)
			return false;
		newest = kept_epoch(old) > epoch ? kept_epoch(old) : epoch;
		joined = (old - kept_epoch(old) + KEPT_ONE) | newest;
		if (__sync_val_compare_and_swap(&v->val, old, joined) != old)
			continue;
		if (kept_is(v, out))
			return true;
		/*
		 * Another key's entry now: it gets back its value or, changed
		 * meanwhile too, its count. The later epoch then stays: an
		 * allocation of that address written before it, of a later
		 * block, could take one of its frees (two races at once).
		 */
		if (__sync_val_compare_and_swap(&v->val, joined, old) != joined)
			__sync_fetch_and_add(&v->val, -KEPT_ONE);
	}
	return false;
}

/*
 * Keeps aside the free, in epoch, of a block the table does not hold: its
 * allocation may be in a batch still to come. 1 if the allocation, handed
 * over meanwhile, was found after all: the pair is accounted for. A global
 * function, checked once rather than with each of its callers' paths, as
 * take_kept_free.
 */
__noinline int keep_free(const struct alloc_key *key, u64 epoch)
{
	struct kept_free val = { .val = epoch | KEPT_ONE };
	struct alloc_key kept;
	u32 way;

	if (!key)
		return 0;
	raise_epoch(&orphan_epoch, epoch);
	for (way = 0; way < ORPHAN_WAYS; way++) {
		kept = orphan_key(key, way);
		val.key = kept;
		if (bpf_map_update_elem(&orphans, &kept, &val, BPF_NOEXIST) == 0)
			break;
	}
	if (way == ORPHAN_WAYS && !join_newest(key, epoch, &kept)) {
		count(COUNTER_ORPHANS_LOST);
		return false;
	}
	full_barrier();
	/* The allocation, handed over meanwhile, may have missed it. */
	return delete_block(key, 0) == 0 && take_one(&kept);
}

/*
 * Whether no batch of the current process can bring the allocation of
 * ptr: its shim was loaded by mdtrace, and counts no allocation at ptr's
 * hash in the batches (a count goes down only once the probes have the
 * allocation). The block is then from before the attach, or its
 * allocation was handed over meanwhile, which the caller looks for again.
 */
static __always_inline bool no_pending_alloc(u64 ptr)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32, n;
	u64 *at = bpf_map_lookup_elem(&inject_pending, &tgid);
	u64 slot = (ptr * 0x9e3779b97f4a7c15ULL) >> (64 - INJECT_PENDING_BITS);

	if (!at || bpf_probe_read_user(&n, sizeof(n), (void *)(*at + 4 * slot)) != 0)
		return false;
	return n == 0;
}

static __always_inline void batch_free_event(struct batch_space *sp, u64 ptr, u64 epoch)
{
	struct alloc_key key = batch_key(sp, ptr);

	if (delete_block(&key, 0) == 0) {
		sp->frees++;
		return;
	}
	if (no_pending_alloc(ptr)) {
		/* Its allocation may have come between the two looks. */
		if (delete_block(&key, 0) == 0)
			sp->frees++;
		else
			sp->unknown++;
		return;
	}
	sp->unknown++;
	if (keep_free(&key, epoch))
		pair_matched(sp);
}

/*
 * A free at the unbatched site while the hooks batch (a free glibc would
 * refuse, one made on a stack the shim does not know or inside a batched
 * call): its block's allocation may still be in another thread's batch,
 * so that it is kept aside as a batch's free, with the epoch the shim
 * moved on for it.
 */
static __always_inline void site_free_batched(u64 ptr, u64 epoch)
{
	struct alloc_key key = block_key(ptr);

	raise_epoch(&last_epoch, epoch);
	if (delete_block(&key, 0) == 0) {
		count(COUNTER_FREES);
		return;
	}
	if (no_pending_alloc(ptr)) {
		count(delete_block(&key, 0) == 0 ? COUNTER_FREES : COUNTER_UNKNOWN_FREES);
		return;
	}
	if (keep_free(&key, epoch)) {
		count(COUNTER_FREES);
		count(COUNTER_FREES_EARLY);
	} else {
		count(COUNTER_UNKNOWN_FREES);
	}
}

/*
 * realloc at the unbatched site while the hooks batch: the old block
 * leaves the table as a realloc's (restored if the realloc fails), or, when
 * the table does not hold it yet, its free is kept aside as a batch's, with
 * the epoch the shim moved on for it, as site_free_batched does.
 */
static __always_inline void site_realloc_batched(u64 ptr, u64 epoch, struct thread_state *ts)
{
	struct alloc_key key = block_key(ptr);

	ts->old_epoch = 0;
	ts->old_gone = 0;
	ts->old_valid = delete_block(&key, &ts->old) == 0;
	if (ts->old_valid) {
		count(COUNTER_FREES);
		return;
	}
	raise_epoch(&last_epoch, epoch);
	if (keep_free(&key, epoch)) {
		count(COUNTER_FREES);
		count(COUNTER_FREES_EARLY);
		ts->old_gone = 1;
	} else {
		count(COUNTER_UNKNOWN_FREES);
		ts->old_epoch = epoch;
	}
}

/*
 * Whether the allocation of key, written in epoch written, cancels against
 * a kept free: one that came later, the earliest of them (a later one is
 * of a later block at the same address). A global function: its loop over
 * the ways, checked at each of its calls, was the most of the verifier's
 * work on a batch's event.
 */
__noinline int take_kept_free(const struct alloc_key *key, u64 written)
{
	struct alloc_key k, best;
	struct kept_free *e;
	u64 v, first = ~0ULL;
	u32 way;

	if (!key || written >= orphan_epoch)
		return false;
	for (way = 0; way < ORPHAN_WAYS; way++) {
		k = orphan_key(key, way);
		e = bpf_map_lookup_elem(&orphans, &k);
		if (!e)
			continue;
		v = kept_value(e);
		if (v >= KEPT_ONE && written < kept_epoch(v) && kept_epoch(v) < first) {
			first = kept_epoch(v);
			best = k;
		}
	}
	return first != ~0ULL && take_one(&best);
}

/*
 * A realloc whose old block's free was kept aside failed: the block stays,
 * and the kept free goes (its own, or the one it joined: the first at or
 * after its epoch). If its allocation came meanwhile and took the free,
 * the block is not in the table: counted as lost.
 */
static __always_inline void realloc_failed_batched(u64 ptr, struct thread_state *ts)
{
	struct alloc_key key = block_key(ptr);

	if (ts->old_gone) {
		count(COUNTER_ORPHANS_LOST);
		return;
	}
	if (take_kept_free(&key, ts->old_epoch - 1)) {
		count_by(COUNTER_UNKNOWN_FREES, -1ULL);
		return;
	}
	count(COUNTER_ORPHANS_LOST);
}

/*
 * The frames of an allocation, or of one taken back, at word f of a batch
 * become its last, which an allocation with BATCH_STACK_PREV names. Their
 * id is taken when an allocation needs it.
 */
static __always_inline void note_frames(struct batch_space *sp, u32 f, u32 nr, u64 cut)
{
	sp->last_f = f;
	sp->last_nr = nr;
	sp->last_cut = cut;
	sp->last_id = 0;
}

/*
 * The stack id of the batch's last frames; 0 when no backtrace was stored
 * (counted). A hash this CPU has seen lately is in the stacks map already,
 * and only a new one is stored; the id is kept for the allocations that
 * name the same frames.
 */
static __always_inline u64 batch_stack(struct batch_space *sp)
{
	u32 f = masked(sp->last_f, BATCH_MASK), nr = sp->last_nr;
	u32 end = masked(f + nr, 2 * BATCH_MASK + 1);
	struct batch_space *own;
	u64 h, *seen, saved = 0;

	if (sp->last_id)
		return sp->last_id;
	if (nr == 0 || nr > stack_depth || nr > MAX_STACK_DEPTH) {
		count(COUNTER_STACK_ERROR);
		return 0;
	}
	h = stack_hash((const struct stack *)&sp->w[f], nr, sp->last_cut);
	if (!stack_seen(h, &seen)) {
		/*
		 * The frames are stored from the thread's space as the map
		 * value it is: batch_event, a global function, gets sp as
		 * plain memory, which kernels before 6.x refuse as the value
		 * of a map update.
		 */
		own = bpf_task_storage_get(&batch_spaces, bpf_get_current_task_btf(), 0, 0);
		if (!own) {
			count(COUNTER_STACK_ERROR);
			return 0;
		}
		/* The word after the frames is the next event's: a zero ends them meanwhile. */
		if (nr < stack_depth) {
			saved = own->w[end];
			own->w[end] = 0;
		}
		h = stack_store(h, (struct stack *)&own->w[f], seen);
		if (nr < stack_depth)
			own->w[end] = saved;
	}
	sp->last_id = h;
	return h;
}

static __always_inline void batch_alloc_event(struct batch_space *sp, u32 at, u32 nr, u64 w0)
{
	u64 written = w0 >> BATCH_EPOCH_SHIFT;
	u64 ptr = sp->w[masked(at + 1, BATCH_MASK)], size = live_size(sp->w[masked(at + 2, BATCH_MASK)]);
	struct alloc_key key = batch_key(sp, ptr);
	struct alloc_info info = {
		.size = size | sp->zygote,
	};

	if (take_kept_free(&key, written)) {
		/* Freed by a thread whose batch came first. */
		sp->allocs++;
		pair_matched(sp);
		return;
	}
	if (backtrace_for(size) && stack_depth > 0 && !(w0 & BATCH_NO_BACKTRACE)) {
		if (nr == 0 && !(w0 & BATCH_STACK_PREV)) {
			count(COUNTER_STACK_ERROR);
		} else {
			/* How the shim's walk ended, counted as the probes count their own. */
			if (w0 & BATCH_STACK_CUT)
				sp->truncated++;
			if (w0 & BATCH_STACK_STOPPED)
				sp->stopped++;
			info.stack_id = batch_stack(sp);
		}
	}
	if (!insert_keyed(&key, &info))
		return;
	sp->allocs++;
	full_barrier();
	/* A free handed over meanwhile may have missed the block. */
	if (take_kept_free(&key, written)) {
		delete_block(&key, 0);
		pair_matched(sp);
	}
}

/*
 * Applies the event at word at of a batch of used words, the batch's
 * epoch being epoch; returns the word after it, or used when the batch
 * ends there or makes no sense (counted).
 */
__noinline int batch_event(struct batch_space *sp, u32 at, u32 used, u64 epoch)
{
	u64 w0;
	u32 kind, nr;

	if (!sp || at >= used || at >= BATCH_WORDS)
		return used;
	w0 = sp->w[masked(at, BATCH_MASK)];
	kind = w0 & BATCH_KIND_MASK;
	nr = (w0 >> BATCH_FRAMES_SHIFT) & BATCH_FRAMES_MASK;
	if (kind == BATCH_FREE && at + 2 <= used) {
		batch_free_event(sp, sp->w[masked(at + 1, BATCH_MASK)], epoch);
		return at + 2;
	}
	if (kind == BATCH_ALLOC && nr <= stack_depth && nr <= MAX_STACK_DEPTH && at + 3 + nr <= used) {
		/* Noted whatever becomes of the allocation: a later one may name them. */
		if (nr != 0)
			note_frames(sp, at + 3, nr, w0 & BATCH_STACK_CUT);
		batch_alloc_event(sp, at, nr, w0);
		return at + 3 + nr;
	}
	/*
	 * An allocation its thread freed before the batch went, and the free:
	 * neither is handed over, but its frames are the batch's last, which
	 * a later allocation may name. Their id is taken if one does.
	 */
	if (kind == BATCH_SKIP && nr <= stack_depth && nr <= MAX_STACK_DEPTH && at + 3 + nr <= used) {
		if (nr != 0)
			note_frames(sp, at + 3, nr, w0 & BATCH_STACK_CUT);
		return at + 3 + nr;
	}
	count(COUNTER_BATCH_LOST);
	return used;
}

/* The events of a batch being applied, a step of bpf_loop each. */
struct batch_walk {
	struct batch_space *sp;
	u64 epoch;
	u32 at, used;
};

/*
 * One event of a batch: the verifier checks this step once, where a loop
 * over BATCH_EVENTS was checked event by event, in each program that
 * applies batches and at each place it does. Returns 1 at the batch's end.
 */
static long batch_step(u64 i, void *data)
{
	struct batch_walk *c = data;

	c->at = batch_event(c->sp, c->at, c->used, c->epoch);
	return c->at >= c->used;
}

/*
 * Reads the batch of used words at addr, with its header, into the
 * thread's space and applies its events, unless it is the batch applied
 * last (a thread killed inside its hand-over, before it could empty the
 * batch). False if it could not be read (counted).
 */
static __always_inline bool apply_batch(struct batch_space *sp, u64 addr, u64 used, u64 epoch, bool inherited)
{
	struct batch_walk c = { .sp = sp, .epoch = epoch, .used = used };
	struct alloc_key key;

	if (used == 0)
		return true;
	if (used > BATCH_WORDS ||
	    bpf_probe_read_user(sp->hdr, BATCH_HEADER + used * 8, (void *)addr) != 0) {
		count(COUNTER_BATCH_LOST);
		return false;
	}
	if (sp->hdr[0] == sp->seq && addr == sp->seq_addr)
		return true;
	sp->seq = sp->hdr[0];
	sp->seq_addr = addr;
	key = block_key(0);
	sp->tgid = key.tgid;
	sp->gen = key.gen;
	sp->zygote = !inherited && have_zygotes && bpf_map_lookup_elem(&zygotes, &key.tgid) ? ALLOC_ZYGOTE : 0;
	sp->allocs = sp->frees = sp->unknown = sp->early = sp->truncated = sp->stopped = 0;
	sp->last_id = 0;
	sp->last_nr = 0;
	bpf_loop(BATCH_EVENTS, batch_step, &c, 0);
	count_by(COUNTER_ALLOCS, sp->allocs);
	count_by(COUNTER_FREES, sp->frees);
	count_by(COUNTER_UNKNOWN_FREES, sp->unknown);
	count_by(COUNTER_FREES_EARLY, sp->early);
	if (sp->truncated)
		count_by(COUNTER_STACK_TRUNCATED, sp->truncated);
	if (sp->stopped)
		count_by(COUNTER_UNWIND_STOPPED, sp->stopped);
	return true;
}

/* A thread hands over its batch: mdshim_site_batch(b, used, epoch, flags). */
static __always_inline void batch_site(struct pt_regs *ctx)
{
	u64 addr = PT_REGS_PARM1(ctx), used = PT_REGS_PARM2(ctx), epoch = PT_REGS_PARM3(ctx);
	u64 flags = PT_REGS_PARM4(ctx), id = bpf_get_current_pid_tgid();
	struct batch_space *sp;
	u32 tid = id;
	struct batch_thread bt = {
		.tgid = heap_tgid(),
		.addr = addr,
	};

	sp = bpf_task_storage_get(&batch_spaces, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!sp) {
		count(COUNTER_BATCH_LOST);
		return;
	}
	raise_epoch(&last_epoch, epoch);
	count_by(COUNTER_PAIRED, flags >> BATCH_PAIRED_SHIFT);
	if (flags & BATCH_RETIRE) {
		apply_batch(sp, addr, used, epoch, false);
		sp->addr = 0;
		bpf_map_delete_elem(&batch_threads, &tid);
		return;
	}
	/* Another thread's batch, copied by a fork, is not this thread's buffer. */
	if (sp->addr != addr && (!(flags & BATCH_INHERITED) || (flags & BATCH_REGISTER))) {
		sp->addr = addr;
		if (bpf_map_update_elem(&batch_threads, &tid, &bt, BPF_ANY) != 0)
			count(COUNTER_BATCH_LOST);
	}
	apply_batch(sp, addr, used, epoch, flags & BATCH_INHERITED);
}

/*
 * A thread ends, however it ends (pthread_exit, the end of its process, a
 * signal): what its batch still holds goes to the table. Every batch
 * written so far has an epoch up to the newest seen, or the one after,
 * being handed over: a free kept from here is later than all.
 */
static __always_inline void drain_thread(void)
{
	struct batch_space *sp;
	u64 hdr[2];
	u32 tid = bpf_get_current_pid_tgid();

	sp = bpf_task_storage_get(&batch_spaces, bpf_get_current_task_btf(), 0, 0);
	if (!sp || !sp->addr)
		return;
	if (bpf_probe_read_user(hdr, sizeof(hdr), (void *)sp->addr) != 0)
		count(COUNTER_BATCH_LOST);
	else
		apply_batch(sp, sp->addr, hdr[1], last_epoch + 2, false);
	sp->addr = 0;
	bpf_map_delete_elem(&batch_threads, &tid);
	__sync_fetch_and_add(&batches_drained, 1);
}

#endif /* MDTRACE_BATCH_H */
