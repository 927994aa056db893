//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * mdtrace's allocation tracker: uprobes on the allocator's entry points and
 * uretprobes on their returns keep a table of the live allocations of the
 * traced processes, with the backtrace of each allocation.
 *
 * Every place that can lose data counts it in the counters map, which user
 * space reports: nothing is dropped silently.
 */
#include "common.h"	/* limits, knobs, counters, a block's key, processes, threads */
#include "table.h"	/* the live table */
#include "stack.h"	/* backtraces */
#include "record.h"	/* record_allocs */
#include "free.h"	/* the free path, verify_pointers' errors */
#include "alloc.h"	/* the allocation path, the calls in flight */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The libraries of a process, after it loaded or unloaded some (struct lib_event). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} notify SEC(".maps");

/*
 * The one entry probe of every allocator function. Its attach cookie names
 * the function (enum call); the arguments are read by position.
 */
SEC("uprobe")
int alloc_entry(struct pt_regs *ctx)
{
	u64 cookie = bpf_get_attach_cookie(ctx);
	u32 call = (u32)cookie;
	u64 a0 = PT_REGS_PARM1(ctx);

	if (ignored())
		return 0;
	switch (call) {
	case CALL_FREE:
		/*
		 * free needs no return probe: the block leaves the table
		 * before the allocator can reuse its address. free(NULL) is
		 * nothing.
		 */
		if (!a0)
			return 0;
		/*
		 * With record_allocs, free has a return probe for its end
		 * time; with verify_pointers, a free inside realloc(p, 0) must
		 * be told apart from the program's own.
		 */
		if (record || verify)
			break;
		if (have_deletes && nested(ctx))
			return 0;
		remove_alloc(ctx, a0, 0, FN_FREE, true);
		return 0;
	case CALL_DELETE:
		/*
		 * An operator delete has a return probe: a free it calls is
		 * inside it, and counts once.
		 */
		if (!a0)
			return 0;
		break;
	case CALL_RUNTIME_NEW:
		return runtime_new(ctx, cookie);
	case CALL_THREAD_END: {
		u64 id = bpf_get_current_pid_tgid();
		struct thread_state *ts;

		/* exit() calls it too, in the thread that calls exit. */
		if ((u32)id == id >> 32)
			return 0;
		ts = thread_state();
		if (ts)
			ts->ending = 1;
		return 0;
	}
	case CALL_USABLE_SIZE:
		count(COUNTER_USABLE_SIZE);
		if (verify && a0) {
			struct alloc_key key = block_key(a0);

			if (!table_find(&key))
				pointer_error(ctx, &key, FN_USABLE_SIZE);
		}
		return 0;
	}
	return enter(ctx, call, a0, PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx));
}

/* The one return probe of every allocating entry point. */
SEC("uretprobe")
int BPF_KRETPROBE(alloc_return, u64 ret)
{
	struct thread_state *ts;
	u64 size, ptr = ret, n;
	u32 call;

	if (ignored())
		return 0;
	ts = thread_state();
	if (!ts || ts->call == CALL_NONE)
		return 0;
	/* A nested call returns with the stack below the outer call's entry. */
	if (PT_REGS_SP(ctx) <= ts->entry_sp)
		return 0;
	call = ts->call;
	ts->call = CALL_NONE;

	switch (call) {
	case CALL_FREE:
	case CALL_DELETE:
		emit(RECORD_FREE, ts->args[0], 0, 0, ts->start_ns);
		return 0;
	case CALL_MALLOC:
		size = ts->args[0];
		emit(RECORD_MALLOC, ptr, size, 0, ts->start_ns);
		break;
	case CALL_NEW_ALIGNED:
		size = ts->args[0];
		emit(RECORD_MEMALIGN, ptr, size, ts->args[1], ts->start_ns);
		break;
	case CALL_VALLOC:
		size = ts->args[0];
		emit(RECORD_MEMALIGN, ptr, size, page_size, ts->start_ns);
		break;
	case CALL_CALLOC:
		size = ts->args[0] * ts->args[1];
		emit(RECORD_CALLOC, ptr, ts->args[1], ts->args[0], ts->start_ns);
		break;
	case CALL_MEMALIGN:
		size = ts->args[1];
		emit(RECORD_MEMALIGN, ptr, size, ts->args[0], ts->start_ns);
		break;
	case CALL_PVALLOC:
		size = (ts->args[0] + page_size - 1) & ~(page_size - 1);
		if (size == 0)
			size = page_size;
		emit(RECORD_MEMALIGN, ptr, size, page_size, ts->start_ns);
		break;
	case CALL_POSIX_MEMALIGN:
		ptr = 0;
		if (ret == 0 && bpf_probe_read_user(&ptr, sizeof(ptr), (void *)ts->args[0]) != 0)
			ptr = 0;
		size = ts->args[2];
		emit(RECORD_MEMALIGN, ptr, size, ts->args[1], ts->start_ns);
		break;
	case CALL_REALLOC:
	case CALL_REALLOCARRAY:
		size = ts->args[1];
		if (call == CALL_REALLOCARRAY) {
			n = ts->args[1];
			size = n * ts->args[2];
			/* The barrier keeps clang from turning the check into a 128-bit multiply. */
			barrier_var(size);
			if (n != 0 && size / n != ts->args[2]) {
				/* Overflow: reallocarray failed, the block is untouched. */
				ptr = 0;
				size = ~0ULL;
			}
		}
		/* An overflowing reallocarray never reaches realloc: no record. */
		if (size != ~0ULL)
			emit(RECORD_REALLOC, ptr, size, ts->args[0], ts->start_ns);
		if (ptr == 0) {
			/* realloc(p, 0) freed p; a failed realloc keeps it. */
			if (size != 0 && ts->old_valid)
				keep_block(ts->args[0], &ts->old);
			return 0;
		}
		break;
	default:
		return 0;
	}
	if (ptr)
		add_alloc(ctx, ptr, size, ts->from_new ? AT_NEW : AT_RETURN, ts);
	return 0;
}

/*
 * Batches (shim/batch.c): a thread of a shim without checks hands over its
 * allocations and frees a buffer at a time. The layout of a buffer, struct
 * md_batch: a sequence word, the count of words in use, then the events,
 * each a word of kind, frame count and epoch, then the block's address,
 * and for an allocation its size and its frames.
 */
#define BATCH_WORDS 440
#define BATCH_HEADER 16
#define BATCH_MASK 511
#define BATCH_ALLOC 1
#define BATCH_FREE 2
#define BATCH_FRAMES_SHIFT 8
#define BATCH_FRAMES_MASK 0x1ff
#define BATCH_EPOCH_SHIFT 20
#define BATCH_REGISTER 1
#define BATCH_RETIRE 2
/* A fork child's copy of calls made before the fork: not a zygote child's. */
#define BATCH_INHERITED 4
/* The most events in a batch: every event takes two words at least. */
#define BATCH_EVENTS (BATCH_WORDS / 2)

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
	s64 allocs, frees, unknown, early;
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
 * that epoch cancels against it; one written after is a new block.
 */
#define MAX_ORPHANS 16384
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_ORPHANS);
	__type(key, struct alloc_key);
	__type(value, u64);
} orphans SEC(".maps");

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
#define ORPHAN_WAYS 4

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

static __always_inline void batch_free_event(struct batch_space *sp, u64 ptr, u64 epoch)
{
	struct alloc_key key = batch_key(sp, ptr), kept;
	u32 way;

	if (delete_block(&key, 0) == 0) {
		sp->frees++;
		return;
	}
	/* Its allocation may be in a batch still to come: kept aside. */
	sp->unknown++;
	raise_epoch(&orphan_epoch, epoch);
	for (way = 0; way < ORPHAN_WAYS; way++) {
		kept = orphan_key(&key, way);
		if (bpf_map_update_elem(&orphans, &kept, &epoch, BPF_NOEXIST) == 0)
			break;
	}
	if (way == ORPHAN_WAYS) {
		count(COUNTER_ORPHANS_LOST);
		return;
	}
	full_barrier();
	/* The allocation, handed over meanwhile, may have missed it. */
	if (delete_block(&key, 0) == 0 && bpf_map_delete_elem(&orphans, &kept) == 0)
		pair_matched(sp);
}

/*
 * Whether the allocation of key, written in epoch written, cancels against
 * a kept free: one that came later, the earliest of them (a later one is
 * of a later block at the same address).
 */
static __always_inline bool take_kept_free(const struct alloc_key *key, u64 written)
{
	struct alloc_key k, best;
	u64 *e, first = ~0ULL;
	u32 way;

	if (written >= orphan_epoch)
		return false;
	for (way = 0; way < ORPHAN_WAYS; way++) {
		k = orphan_key(key, way);
		e = bpf_map_lookup_elem(&orphans, &k);
		if (e && written < *e && *e < first) {
			first = *e;
			best = k;
		}
	}
	return first != ~0ULL && bpf_map_delete_elem(&orphans, &best) == 0;
}

static __always_inline void batch_alloc_event(struct batch_space *sp, u32 at, u32 nr, u64 written)
{
	u64 ptr = sp->w[masked(at + 1, BATCH_MASK)], size = sp->w[masked(at + 2, BATCH_MASK)];
	u32 f = masked(at + 3, BATCH_MASK), end = masked(f + nr, 2 * BATCH_MASK + 1);
	struct alloc_key key = batch_key(sp, ptr);
	struct alloc_info info = {
		.size = size | sp->zygote,
	};
	struct batch_space *own;
	u64 saved = 0;

	if (take_kept_free(&key, written)) {
		/* Freed by a thread whose batch came first. */
		sp->allocs++;
		pair_matched(sp);
		return;
	}
	if (backtrace_for(size) && stack_depth > 0) {
		/*
		 * The frames are stored from the thread's space as the map
		 * value it is: batch_event, a global function, gets sp as
		 * plain memory, which kernels before 6.x refuse as the value
		 * of a map update.
		 */
		own = bpf_task_storage_get(&batch_spaces, bpf_get_current_task_btf(), 0, 0);
		if (nr == 0 || !own) {
			count(COUNTER_STACK_ERROR);
		} else {
			/* The word after the frames is the next event's: a zero ends them meanwhile. */
			if (nr < stack_depth) {
				saved = own->w[end];
				own->w[end] = 0;
			}
			info.stack_id = stack_id_of((struct stack *)&own->w[f], nr);
			if (nr < stack_depth)
				own->w[end] = saved;
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
	kind = w0 & 0xff;
	nr = (w0 >> BATCH_FRAMES_SHIFT) & BATCH_FRAMES_MASK;
	if (kind == BATCH_FREE && at + 2 <= used) {
		batch_free_event(sp, sp->w[masked(at + 1, BATCH_MASK)], epoch);
		return at + 2;
	}
	if (kind == BATCH_ALLOC && nr <= stack_depth && nr <= MAX_STACK_DEPTH && at + 3 + nr <= used) {
		batch_alloc_event(sp, at, nr, w0 >> BATCH_EPOCH_SHIFT);
		return at + 3 + nr;
	}
	count(COUNTER_BATCH_LOST);
	return used;
}

/*
 * Reads the batch of used words at addr, with its header, into the
 * thread's space and applies its events, unless it is the batch applied
 * last (a thread killed inside its hand-over, before it could empty the
 * batch). False if it could not be read (counted).
 */
static __always_inline bool apply_batch(struct batch_space *sp, u64 addr, u64 used, u64 epoch, bool inherited)
{
	struct alloc_key key;
	u32 i, at = 0;

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
	sp->allocs = sp->frees = sp->unknown = sp->early = 0;
	for (i = 0; i < BATCH_EVENTS; i++) {
		at = batch_event(sp, at, used, epoch);
		if (at >= used)
			break;
	}
	count_by(COUNTER_ALLOCS, sp->allocs);
	count_by(COUNTER_FREES, sp->frees);
	count_by(COUNTER_UNKNOWN_FREES, sp->unknown);
	count_by(COUNTER_FREES_EARLY, sp->early);
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

/*
 * The drain at the entry of do_exit, where the thread's memory is still
 * there on every kernel. The sched_process_exit tracepoint comes after the
 * kernel lets go of it on older kernels (6.1); it is the drain where
 * kprobes cannot be used.
 */
SEC("kprobe/do_exit")
int batch_drain_kprobe(void *ctx)
{
	drain_thread();
	return 0;
}

SEC("raw_tp/sched_process_exit")
int batch_drain(void *ctx)
{
	drain_thread();
	return 0;
}

/* The shim's probe sites: the attach cookie of alloc_site. */
enum site {
	SITE_ALLOC = 1, /* mdshim_site_alloc(ret, call, a0, a1, start_ns) */
	SITE_FREE,	/* mdshim_site_free(ptr, call) */
	SITE_BATCH,	/* mdshim_site_batch(batch, used, epoch, flags) */
};

/*
 * The one program of the shim's probe sites (shim/site.c). The shim calls
 * them with everything in registers: one probe per call, no return probe,
 * no per-thread state except across a realloc. Sizes are the ones the
 * program asked for, whatever guards the shim adds.
 */
SEC("uprobe")
int alloc_site(struct pt_regs *ctx)
{
	u64 ptr = PT_REGS_PARM1(ctx), size;
	u32 call = PT_REGS_PARM2(ctx);
	u64 a0 = PT_REGS_PARM3(ctx), a1 = PT_REGS_PARM4(ctx), start = PT_REGS_PARM5(ctx);
	struct thread_state *ts;

	if (ignored())
		return 0;
	if (bpf_get_attach_cookie(ctx) == SITE_BATCH) {
		batch_site(ctx);
		return 0;
	}
	if (bpf_get_attach_cookie(ctx) == SITE_FREE) {
		if (call == CALL_REALLOC) {
			/* The old block comes back if the realloc fails. */
			ts = thread_state();
			if (ts)
				remove_alloc(ctx, ptr, ts, FN_REALLOC, false);
			return 0;
		}
		remove_alloc(ctx, ptr, 0, FN_FREE, false);
		return 0;
	}
	switch (call) {
	case CALL_FREE:
		/* Only while recording: the end of a free. */
		emit(RECORD_FREE, a0, 0, 0, start);
		return 0;
	case CALL_MALLOC:
		size = a0;
		emit(RECORD_MALLOC, ptr, size, 0, start);
		break;
	case CALL_CALLOC:
		size = a0 * a1;
		emit(RECORD_CALLOC, ptr, a1, a0, start);
		break;
	case CALL_MEMALIGN:
		size = a1;
		emit(RECORD_MEMALIGN, ptr, size, a0, start);
		break;
	case CALL_REALLOC:
		size = a1;
		emit(RECORD_REALLOC, ptr, size, a0, start);
		if (a0 == 0)
			break;
		ts = thread_state();
		if (!ts)
			break;
		/* realloc(p, 0) freed p; a failed realloc keeps it. */
		if (ptr == 0 && size != 0 && ts->old_valid)
			keep_block(a0, &ts->old);
		ts->old_valid = 0;
		break;
	default:
		return 0;
	}
	if (ptr)
		add_alloc(ctx, ptr, size, AT_SITE, 0);
	return 0;
}

/*
 * A thread of a traced process ends: record_allocs writes "TID: thread_done".
 * The process's main thread ends with the process and gets no line, as in
 * Android, where the line comes from a thread-local destructor.
 */
SEC("raw_tp/sched_process_exit")
int thread_exit(void *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;

	if (!record || (u32)id == tgid || !bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	emit(RECORD_THREAD_DONE, 0, 0, 0, 0);
	return 0;
}

/* The largest library path reported. */
#define LIB_NAME_LEN 256
/* The most libraries walked in one list. */
#define MAX_LIBS 512

/* A library in the loader's list: where it is loaded and its path. */
struct lib_event {
	u32 tgid;
	u32 pad;
	u64 base; /* l_addr: the load bias */
	char name[LIB_NAME_LEN];
};

/* Names struct lib_event in BTF, so that Go gets the type. */
const struct lib_event unused_lib_event __attribute__((unused)) = {};

/* Where the loader's r_debug is in each traced process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, MAX_PROCESSES);
	__type(key, u32);
	__type(value, u64);
} rdebug SEC(".maps");

/*
 * The dynamic loader calls _dl_debug_state around every change of its list
 * of libraries (the debuggers' hook). Once the list is consistent again,
 * this walks it and reports every library with its load address, so that
 * user space can name the frames of a library unloaded (dlclose) before
 * the report, however quickly that happens.
 */
/* The walk of the loader's list, one library per step of bpf_loop. */
struct lib_walk {
	u64 lm; /* the next struct link_map */
	u32 tgid;
};

static long report_library(u64 i, void *data)
{
	struct lib_walk *w = data;
	struct lib_event *e;
	u64 name = 0;

	if (!w->lm)
		return 1;
	/* struct link_map: l_addr (0), l_name (8), l_ld (16), l_next (24). */
	if (bpf_probe_read_user(&name, sizeof(name), (void *)(w->lm + 8)) != 0)
		return 1;
	e = bpf_ringbuf_reserve(&notify, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_NOTIFY_LOST);
		return 1;
	}
	e->tgid = w->tgid;
	e->pad = 0;
	e->name[0] = 0;
	if (bpf_probe_read_user(&e->base, sizeof(e->base), (void *)w->lm) != 0)
		e->base = 0;
	if (name)
		bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)name);
	bpf_ringbuf_submit(e, 0);
	if (bpf_probe_read_user(&w->lm, sizeof(w->lm), (void *)(w->lm + 24)) != 0)
		return 1;
	return 0;
}

SEC("uprobe")
int libraries_changed(struct pt_regs *ctx)
{
	struct lib_walk w = { .tgid = bpf_get_current_pid_tgid() >> 32 };
	u64 *rd = bpf_map_lookup_elem(&rdebug, &w.tgid);
	int state = -1;

	if (!rd)
		return 0;
	/* struct r_debug: int r_version; link_map *r_map (8); r_brk (16); r_state (24). */
	if (bpf_probe_read_user(&state, sizeof(state), (void *)(*rd + 24)) != 0 || state != 0)
		return 0;
	if (bpf_probe_read_user(&w.lm, sizeof(w.lm), (void *)(*rd + 8)) != 0)
		return 0;
	/* A callback the verifier checks once, where a loop would be checked MAX_LIBS times. */
	bpf_loop(MAX_LIBS, report_library, &w, 0);
	return 0;
}

/* The longest executable path program mode looks at. */
#define EXEC_NAME_LEN 256

/* Program mode: processes that start to be traced (struct exec_event). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} execs SEC(".maps");

/* A process that program mode traces from its exec, or its fork, on. */
struct exec_event {
	u32 tgid;
	u32 parent;		  /* a fork: the traced process that forked it; 0 for an exec */
	char name[EXEC_NAME_LEN]; /* an exec: the path it executed */
};

/* Names struct exec_event in BTF, so that Go gets the type. */
const struct exec_event unused_exec_event __attribute__((unused)) = {};

/* The path being matched, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct exec_event);
} exec_scratch SEC(".maps");

struct linux_binprm___md {
	const char *filename;
} __attribute__((preserve_access_index));

/* A search of program_name in the file name: base and len bound it. */
struct name_match {
	u32 base;
	u32 len;
	u32 found;
};

/* One step of the scan for the file name: is the character at i a slash? */
static long find_base(u64 i, void *data)
{
	struct name_match *m = data;
	u32 zero = 0;
	struct exec_event *e = bpf_map_lookup_elem(&exec_scratch, &zero);

	if (!e || i >= m->len)
		return 1;
	if (e->name[i & (EXEC_NAME_LEN - 1)] == '/')
		m->base = i + 1;
	return 0;
}

/* One step of the search: does program_name start at base + i? */
static long match_at(u64 i, void *data)
{
	struct name_match *m = data;
	u32 zero = 0, start = m->base + (u32)i, j;
	struct exec_event *e = bpf_map_lookup_elem(&exec_scratch, &zero);

	if (!e || start + program_len > m->len)
		return 1;
	for (j = 0; j < PROGRAM_NAME_MAX && j < program_len; j++) {
		if (e->name[(start + j) & (EXEC_NAME_LEN - 1)] != program_name[j])
			return 0;
	}
	m->found = 1;
	return 1;
}

/*
 * A process executed a program: in program mode it is traced from its
 * first instruction when the file name (after the last slash) contains
 * program_name, and user space hears of it; otherwise it is not traced.
 */
SEC("raw_tp/sched_process_exec")
int program_exec(u64 *ctx)
{
	struct linux_binprm___md *bprm = (void *)ctx[2];
	u32 tgid = bpf_get_current_pid_tgid() >> 32, zero = 0, one = 1;
	struct name_match m = {};
	struct exec_event *s, *e;
	const char *filename;
	long n;

	if (!program_len)
		return 0;
	s = bpf_map_lookup_elem(&exec_scratch, &zero);
	if (!s)
		return 0;
	if (bpf_probe_read_kernel(&filename, sizeof(filename), &bprm->filename) != 0)
		return 0;
	n = bpf_probe_read_kernel_str(s->name, sizeof(s->name), filename);
	if (n <= 1)
		return 0;
	m.len = n - 1;
	bpf_loop(EXEC_NAME_LEN, find_base, &m, 0);
	bpf_loop(EXEC_NAME_LEN, match_at, &m, 0);
	/* A new program is no zygote child. */
	bpf_map_delete_elem(&zygotes, &tgid);
	if (!m.found) {
		bpf_map_delete_elem(&traced, &tgid);
		return 0;
	}
	if (bpf_map_update_elem(&traced, &tgid, &one, BPF_ANY) != 0) {
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	e = bpf_ringbuf_reserve(&execs, sizeof(*e), 0);
	if (!e) {
		/* Traced, but user space will not hear of it. */
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	e->tgid = tgid;
	e->parent = 0;
	__builtin_memcpy(e->name, s->name, sizeof(e->name));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/*
 * A traced process executed a program: the gen of its blocks from now on.
 * (Program mode also decides here whether the process is traced; a process
 * it starts to trace has no blocks yet.)
 */
SEC("raw_tp/sched_process_exec")
int exec_gen(u64 *ctx)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32, tid = bpf_get_current_pid_tgid(), old = ctx[1], gen;
	struct batch_space *sp;

	if (!bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	/*
	 * The old program's batch went with its memory (its calls with its
	 * blocks); the thread may have had another id before the exec.
	 */
	sp = bpf_task_storage_get(&batch_spaces, bpf_get_current_task_btf(), 0, 0);
	if (sp && sp->addr) {
		sp->addr = 0;
		bpf_map_delete_elem(&batch_threads, &tid);
		bpf_map_delete_elem(&batch_threads, &old);
	}
	gen = current_gen();
	if (bpf_map_update_elem(&gens, &tgid, &gen, BPF_ANY) != 0)
		count(COUNTER_GEN_LOST);
	return 0;
}

/*
 * Program mode: a child forked by a traced process is traced too, as a
 * zygote child. (A vfork child shares its parent's memory until it
 * executes a program, which ends it as a zygote child.)
 */
SEC("raw_tp/sched_process_fork")
int program_fork(u64 *ctx)
{
	struct task_struct___md *child = (void *)ctx[1];
	u32 tgid = bpf_get_current_pid_tgid() >> 32, one = 1;
	struct exec_event *e;
	int child_tgid = 0;

	if (!program_len || !bpf_map_lookup_elem(&traced, &tgid))
		return 0;
	if (bpf_probe_read_kernel(&child_tgid, sizeof(child_tgid), &child->tgid) != 0 || (u32)child_tgid == tgid)
		return 0;
	if (bpf_map_update_elem(&traced, &child_tgid, &one, BPF_ANY) != 0) {
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	/* A zygote child from its first allocation (have_zygotes is set). */
	if (bpf_map_update_elem(&zygotes, &child_tgid, &one, BPF_ANY) != 0)
		count(COUNTER_PROGRAM_LOST);
	/* User space follows it, unless it follows it already through its parent. */
	e = bpf_ringbuf_reserve(&execs, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_PROGRAM_LOST);
		return 0;
	}
	e->tgid = child_tgid;
	e->parent = tgid;
	e->name[0] = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}
