/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Backtraces: the frame-pointer walk of the current thread, and the stacks
 * map, which holds each unique backtrace under its id.
 */
#ifndef MDTRACE_STACK_H
#define MDTRACE_STACK_H

#include "common.h"
#include "unwind.h"

/* Defaults; user space sets the real sizes before loading. */
#define DEFAULT_MAX_STACKS 65536

/*
 * A backtrace: the return addresses, innermost first, ended by a zero when
 * there are fewer than stack_depth. Without a count in front, a 16-frame
 * value is 128 bytes, and its map element fits the kernel's 192-byte slab
 * class instead of the 256-byte one.
 */
struct stack {
	u64 ips[MAX_STACK_DEPTH];
};

/*
 * Unique backtraces, keyed by a 64-bit hash of their frames. The value size
 * is set by user space to hold exactly stack_depth frames, so it carries no
 * BTF type.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, DEFAULT_MAX_STACKS);
	__uint(key_size, sizeof(u64));
	__uint(value_size, sizeof(struct stack));
} stacks SEC(".maps");

/*
 * The hashes of the backtraces each CPU stored or found in the stacks map
 * lately, by their low bits: a hot call site costs a look at this array
 * instead of a hash map lookup. The stacks map only grows, so a hash seen
 * there stays valid.
 */
#define SEEN_STACKS 4096
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SEEN_STACKS);
	__type(key, u32);
	__type(value, u64);
} seen_stacks SEC(".maps");

/* Scratch space for one backtrace per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct stack);
} stack_scratch SEC(".maps");

/* Where a backtrace is taken, which decides how its first frame is found. */
enum stack_at {
	/*
	 * A return probe: the instruction pointer is the return address in
	 * the allocator's caller, so the caller is the first frame and the
	 * allocator's own frames are not in the stack.
	 */
	AT_RETURN = 0,
	/*
	 * A function's entry: the first frame is the function itself and its
	 * caller is missing from the frame chain; the return address at *sp
	 * takes the first frame's place.
	 */
	AT_ENTRY,
	/*
	 * A shim probe site, called by a hook that keeps its frame pointer:
	 * the first frame is the site, and the chain goes on from the hook's
	 * return address, the program's call of the allocator. The site's
	 * frame is skipped.
	 */
	AT_SITE,
	/*
	 * An allocation inside a C++ runtime's operator new (libstdc++'s
	 * calls malloc and keeps no frame pointer): the first frame is the
	 * return address new's entry found at *sp, the function that called
	 * new, and the chain goes on from the frame pointer new was called
	 * with (see struct thread_state).
	 */
	AT_NEW,
};

/*
 * The stack memory a walk reads at once: up to WALK_CHUNK bytes from a
 * frame record, not beyond its page, so that one read of user memory
 * usually covers several frames. The slack lets a record at the end be
 * read with a masked offset.
 */
#define WALK_CHUNK 1024
struct walk_buf {
	u8 b[WALK_CHUNK + 16];
	/*
	 * The walk's state, kept here rather than on the BPF stack: loaded
	 * from a map, its values are unknown to the verifier, so that it
	 * checks a step of the walk once instead of once per frame. r holds
	 * the frame's registers; sp0 is the stack pointer the walk began at.
	 */
	struct unwind_regs r;
	u64 sp0, base, len;
	u32 nr;
	/* The walk reached the frame limit with a frame left beyond it. */
	u32 truncated;
	/*
	 * The walk stopped where mdtrace can finish it (see defer_walk):
	 * DEFER_AT_FRAME when r.ip is the last frame kept, whose caller is
	 * to be found, DEFER_AT_CALLER when r.ip is a caller found but not
	 * kept yet, to be checked first; 0 when it did not.
	 */
	u32 deferred;
	u32 unused;
};

#define DEFER_AT_FRAME 1
#define DEFER_AT_CALLER 2

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct walk_buf);
} walk_scratch SEC(".maps");

/*
 * A walk the probes stopped at code in no mapping of the process's list
 * while the list may lack a library (the loader's notice wrote it, and
 * mdtrace has not rewritten it since): a library dlopen'ed a moment ago,
 * whose table mdtrace is still loading. Its stack id is a number of its
 * own (STACK_ID_DEFERRED), its frames so far are stored under it, and
 * this event brings mdtrace what it needs to finish the walk once the
 * table is there (tracer/deferred.go): the registers where it stopped and
 * a copy of the stack above them. mdtrace then rewrites the id's frames.
 */
struct defer_event {
	u32 tgid, tid;
	u64 id;
	/* The registers where the walk stopped, and the stack pointer it began at. */
	u64 ip, sp, fp, sp0;
	u32 exact;
	u32 at;	 /* DEFER_AT_FRAME or DEFER_AT_CALLER */
	u32 nr;	 /* the frames kept so far, in ips */
	u32 len; /* the bytes of stack copied from sp */
	u64 ips[MAX_STACK_DEPTH];
	/* The copy, read a page at a time where the stack ends within DEFER_STACK: room for one more. */
	u8 stack[DEFER_STACK + 4096];
};

/* Names struct defer_event in BTF, so that Go gets the type. */
const struct defer_event unused_defer_event __attribute__((unused)) = {};

/*
 * The deferred walks for mdtrace to finish. Its room bounds the walks in
 * flight (about 100); user space makes it a page when the walks have no
 * tables to wait for.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 2 << 20);
} deferred SEC(".maps");

/*
 * The most walks a CPU defers a second: each is a 16 KB read of the stack
 * and a walk in user space. Past it a walk stops as it would have, counted.
 */
#define DEFER_PER_SECOND 256
struct defer_budget {
	u64 window; /* the second the count is of, in ns since boot / 2^30 */
	u64 n;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct defer_budget);
} defer_budget SEC(".maps");

/*
 * Under --all, the walks each process without a list of mappings has
 * deferred (by its tgid): at most DEFER_NEW; mdtrace makes its list on
 * hearing of the first. A new process's count (a PID is used again once
 * the kernel's pid_max is reached) and a new program's start from none.
 */
#define DEFER_NEW 32

/*
 * Under --all, the walks a second of a process with a list that stop
 * outside it and are left to mdtrace: the list, made when mdtrace heard of
 * the process, may be of its moment of exec, before the loader mapped its
 * libraries, or before a dlopen since (no loader is watched there).
 */
#define DEFER_STALE 4
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u32);
} defer_new SEC(".maps");

/* The last deferred walk's number: ids are (number << 2) | STACK_ID_DEFERRED. */
u64 defer_seq = 0;

/*
 * Whether the walk stopped at w->r may be left for mdtrace to finish: the
 * process's list may lack the library the stop is in (the loader's notice
 * rewrote it since mdtrace did), or, under --all, the process has no list
 * yet (it started a moment ago: mdtrace makes its list when it hears of
 * the walk), or, under --all, the list may be older than the process's
 * libraries (DEFER_STALE); and this CPU's budget has room left. Only at
 * a stop: the walks that go on pay nothing.
 */
static __noinline bool may_defer(struct unwind_proc *up)
{
	struct defer_budget *b;
	u32 zero = 0, tgid, *n, one = 1, second;
	u64 now, *notices;

	if (up && !up->unsorted) {
		/*
		 * A sorted list, written by user space from maps read before
		 * the loader's last notice, may lack the library that notice
		 * was of, until user space writes it again.
		 */
		tgid = bpf_get_current_pid_tgid() >> 32;
		notices = bpf_map_lookup_elem(&unwind_notices, &tgid);
		if (!notices || *notices == up->notices) {
			if (!gens_all)
				return false;
			second = (u32)(bpf_ktime_get_ns() >> 30);
			if (up->stale_second != second) {
				up->stale_second = second;
				up->stale_walks = 0;
			}
			if (up->stale_walks >= DEFER_STALE)
				return false;
			__sync_fetch_and_add(&up->stale_walks, 1);
		}
	} else if (!up && !gens_all) {
		return false;
	}
	if (!up) {
		/*
		 * A process without a list: its first DEFER_NEW walks, no
		 * more, so that one busy process does not spend every other
		 * one's budget before mdtrace has made its list.
		 */
		tgid = bpf_get_current_pid_tgid() >> 32;
		n = bpf_map_lookup_elem(&defer_new, &tgid);
		if (!n) {
			bpf_map_update_elem(&defer_new, &tgid, &one, BPF_ANY);
		} else if (*n >= DEFER_NEW) {
			count(COUNTER_UNWIND_DEFER_LOST);
			return false;
		} else {
			__sync_fetch_and_add(n, 1);
		}
	}
	b = bpf_map_lookup_elem(&defer_budget, &zero);
	if (!b)
		return false;
	now = bpf_ktime_get_ns() >> 30;
	if (b->window != now) {
		b->window = now;
		b->n = 0;
	}
	if (b->n >= DEFER_PER_SECOND) {
		count(COUNTER_UNWIND_DEFER_LOST);
		return false;
	}
	b->n++;
	return true;
}

/*
 * How far above the stack pointer a frame record may be: the default stack
 * size of a thread (and of the main thread, RLIMIT_STACK), 8 MiB.
 */
#define STACK_SPAN (8ULL << 20)
/* The end of user space on x86-64 with 4-level page tables. */
#define USER_TOP (1ULL << 47)
/* No code is mapped in the first page. */
#define USER_BOTTOM 4096ULL

/* A walk in progress (walk_frames): where it goes, its state, and the
 * process's unwind tables (NULL: frame pointers only). */
struct walk {
	struct stack *st;
	struct walk_buf *w;
	struct unwind_proc *up;
};

/*
 * One frame-pointer step: the record at w->r.fp is the caller's frame
 * pointer, then the return address. Returns 1 when the walk ends.
 */
static __always_inline long fp_step(struct walk_buf *w)
{
	u64 fp = w->r.fp, next, ret, off, len;

	if ((fp & 7) || fp < w->sp0 || fp - w->sp0 >= STACK_SPAN || fp < w->r.sp)
		return 1;
	if (fp < w->base || fp + 16 > w->base + w->len) {
		/* The record is aligned: it does not cross its page. */
		len = page_size - (fp & (page_size - 1));
		if (len > WALK_CHUNK)
			len = WALK_CHUNK;
		if (len < 16 || bpf_probe_read_user(w->b, len, (void *)fp) != 0)
			return 1;
		w->base = fp;
		w->len = len;
	}
	off = (fp - w->base) & (WALK_CHUNK - 1);
	next = *(u64 *)&w->b[off];
	ret = *(u64 *)&w->b[off + 8];
	if (ret < USER_BOTTOM || ret >= USER_TOP)
		return 1;
	/*
	 * next is the caller's rbp, whatever it holds: a frame record
	 * further up, or data in code without frame pointers, where the
	 * next frame-pointer step stops (it must go up the stack).
	 */
	w->r.ip = ret;
	w->r.sp = fp + 16;
	w->r.fp = next;
	w->r.exact = 0;
	return 0;
}

/*
 * One frame of the walk, a step of bpf_loop: the verifier checks it a few
 * times, whatever the depth, where an unrolled loop of 256 frames is more
 * than it takes. Each step finds the caller of the frame at w->r.ip, by the
 * unwind tables where its file has them, else by its frame pointer, and
 * records the caller's return address. Returns 1 when the walk ends.
 */
static long walk_step(u64 i, void *data)
{
	struct walk *c = data;
	struct walk_buf *w = c->w;
	u32 nr = w->nr;

	bool full = nr >= stack_depth || nr >= MAX_STACK_DEPTH;
	bool unknown = false;

	if (c->up) {
		switch (unwind_step(c->up, &w->r)) {
		case STEP_ON:
			goto found;
		case STEP_NO_TABLE:
			break;
		case STEP_UNKNOWN:
			/*
			 * Code in no file of the list: perhaps a library the
			 * list does not have yet, which mdtrace can finish
			 * the walk through, from this frame, once it is there.
			 */
			if (!full && may_defer(c->up)) {
				w->deferred = DEFER_AT_FRAME;
				return 1;
			}
			unknown = true;
			break;
		case STEP_NO_FDE:
			unknown = true;
			break;
		case STEP_STOP:
			/* Past the limit, whether more frames were there is not known. */
			if (!full)
				count(COUNTER_UNWIND_STOPPED);
			return 1;
		default:
			return 1;
		}
	}
	if (fp_step(w)) {
		/*
		 * Where the tables know nothing of the frame's code (in no file,
		 * or where its file's table has no rule), the end of its
		 * frame-pointer chain is not the end of the stack: cut short.
		 */
		if (unknown && !full)
			count(COUNTER_UNWIND_STOPPED);
		/*
		 * Without the process's tables, whether the chain ended at the
		 * outermost frame or at code without frame pointers is not
		 * known: rbp, a register like any other there, may hold 0.
		 * Under --all such a walk is one past the bounds of those left
		 * to mdtrace, counted as such (may_defer).
		 */
		else if (!c->up && !full && !gens_all)
			count(COUNTER_UNWIND_NO_LIST);
		return 1;
	}
found:
	if (w->r.ip < USER_BOTTOM || w->r.ip >= USER_TOP)
		return 1;
	if (full) {
		/* A caller past the limit: the backtrace is cut, not complete. */
		if (!c->up || find_mapping(c->up, &w->r, w->r.ip) >= 0) {
			w->truncated = 1;
			count(COUNTER_STACK_TRUNCATED);
		}
		return 1;
	}
	/* A return address is believed only in an executable file mapping. */
	if (c->up) {
		int idx = find_mapping(c->up, &w->r, w->r.ip);

		if (idx < 0) {
			/* A caller in a library the list may not have yet, as above. */
			if (may_defer(c->up)) {
				w->deferred = DEFER_AT_CALLER;
				return 1;
			}
			count(COUNTER_UNWIND_STOPPED);
			return 1;
		}
		w->r.hint = idx + 1;
	}
	c->st->ips[nr & (MAX_STACK_DEPTH - 1)] = w->r.ip;
	w->nr = nr + 1;
	return 0;
}

/*
 * Walks the stack of the current thread into st->ips, with the allocator's
 * caller first (see enum stack_at). Where the process has unwind tables
 * (mdtrace loads them from each file's .eh_frame and .debug_frame), each
 * frame's caller is found with its file's rules, frame pointers or not;
 * elsewhere by the frame-pointer chain, as the kernel's user stack walk
 * does, but reading the stack a chunk at a time instead of a frame at a
 * time. A frame-pointer step stops at a null, misaligned or unreadable
 * frame pointer, one that does not go up the stack, or one that is not
 * within STACK_SPAN above the stack pointer, and at a return address
 * outside user space: code built without frame pointers uses the register
 * for data, and its records would be whatever that data points to (a heap
 * block, a string), not frames. A table step stops at a pc outside the
 * process's executable file mappings and at a rule it cannot follow
 * (counted), and ends cleanly at the outermost frame (_start, clone3).
 * Returns the number of frames, 0 if there is none.
 */
static __always_inline u32 walk_frames(struct pt_regs *ctx, struct stack *st, u32 at, bool have_new,
				       u64 new_ret, u64 new_fp, u32 *truncated, struct walk_buf **walked)
{
	u32 zero = 0, tgid = bpf_get_current_pid_tgid() >> 32;
	struct walk c = { .st = st };
	struct walk_buf *w = bpf_map_lookup_elem(&walk_scratch, &zero);

	if (!w)
		return 0;
	c.w = w;
	c.up = bpf_map_lookup_elem(&unwind_procs, &tgid);
	w->r.ip = PT_REGS_IP(ctx);
	w->r.fp = PT_REGS_FP(ctx);
	w->r.sp = w->sp0 = PT_REGS_SP(ctx);
	w->r.exact = 0;
	w->r.hint = 0;
	w->base = w->len = 0;
	w->nr = 0;
	w->truncated = 0;
	w->deferred = 0;
	*walked = w;
	switch (at) {
	case AT_RETURN:
		/* The allocator's caller, at the call's return address. */
		st->ips[0] = w->r.ip;
		w->nr = 1;
		break;
	case AT_ENTRY:
		/*
		 * A function's first instruction: its own frame is not kept;
		 * its return address is at sp, its caller's frame above it.
		 */
		if (bpf_probe_read_user(&w->r.ip, sizeof(u64), (void *)w->r.sp) != 0)
			return 0;
		w->r.sp += 8;
		st->ips[0] = w->r.ip;
		w->nr = 1;
		break;
	case AT_SITE:
		/* The hook's frame record: its return address is the first frame. */
		if (fp_step(w))
			return 0;
		st->ips[0] = w->r.ip;
		w->nr = 1;
		break;
	case AT_NEW:
		if (c.up) {
			/* The tables go through new's frame, as Android's unwinder does. */
			st->ips[0] = w->r.ip;
			w->nr = 1;
			break;
		}
		if (!have_new)
			return 0;
		st->ips[0] = new_ret;
		w->r.fp = new_fp;
		w->nr = 1;
		break;
	}
	/* --all: a process mdtrace has no list of yet, walked once it has. */
	if (!c.up && gens_all && may_defer(0)) {
		w->deferred = DEFER_AT_FRAME;
		return w->nr;
	}
	bpf_loop(MAX_STACK_DEPTH, walk_step, &c, 0);
	*truncated = w->truncated;
	return w->nr;
}

/*
 * The id of the backtrace of nr frames at ips: a 64-bit hash of its frames,
 * which mdtrace computes the same way (tracer/batch.go). The lowest bit
 * says the backtrace was cut at the frame limit: a cut one never shares an
 * id with a complete one of the same frames. No hash has the bit of a
 * deferred walk's id (STACK_ID_DEFERRED).
 *
 * A global function: what follows the loop is checked once, not once for
 * each number of frames the loop may end at. nr is at most stack_depth, a
 * constant to the verifier: bounded by it, the loop is checked stack_depth
 * times rather than MAX_STACK_DEPTH.
 */
__noinline u64 stack_hash(const struct stack *st, u32 nr, u32 truncated)
{
	u64 h = nr;
	u32 i;

	if (!st)
		return 4;
	for (i = 0; i < MAX_STACK_DEPTH; i++) {
		if (i >= nr || i >= stack_depth)
			break;
		h = mix64(h ^ st->ips[i]);
	}
	h = (h & ~(u64)(STACK_ID_TRUNCATED | STACK_ID_DEFERRED)) | (truncated ? STACK_ID_TRUNCATED : 0);
	if (h == 0)
		h = 4;
	return h;
}

/*
 * The slot of this CPU's recent stacks for id h, and whether it holds h:
 * the stack is in the stacks map then.
 */
static __always_inline bool stack_seen(u64 h, u64 **seen)
{
	u32 slot = (u32)h & (SEEN_STACKS - 1);

	*seen = bpf_map_lookup_elem(&seen_stacks, &slot);
	return *seen && **seen == h;
}

/*
 * Stores the backtrace st (followed by a zero when there are fewer than
 * stack_depth frames) under its id h in the stacks map if it is not there
 * yet, and notes h in the CPU's recent stacks at seen. Returns h, or 0 when
 * it could not be stored (counted).
 */
static __always_inline u64 stack_store(u64 h, struct stack *st, u64 *seen)
{
	struct stack *old;

	old = bpf_map_lookup_elem(&stacks, &h);
	if (old) {
		if (old->ips[0] != st->ips[0]) {
			count(COUNTER_STACK_COLLISION);
			return 0;
		}
		goto found;
	}
	if (bpf_map_update_elem(&stacks, &h, st, BPF_NOEXIST) != 0) {
		/* Another CPU may have stored the same stack just now. */
		if (bpf_map_lookup_elem(&stacks, &h))
			goto found;
		count(COUNTER_STACK_FULL);
		return 0;
	}
found:
	if (seen)
		*seen = h;
	return h;
}

/*
 * Hands the walk w stopped, nr frames in the CPU's stack_scratch so far,
 * to mdtrace to finish (see struct defer_event): stores the frames under
 * a new id and sends the event. A global function, checked once; it
 * looks the frames up itself, as 6.1 stores no map value from a global
 * function's argument. Returns the id; 0 when the walk could not be
 * handed over (counted), which then stops as it would have.
 */
__noinline u64 defer_walk(struct walk_buf *w, u32 nr)
{
	struct defer_event *e;
	struct stack *st;
	u64 id, sp, off, first;
	u32 i, zero = 0;

	st = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!st || !w)
		return 0;
	e = bpf_ringbuf_reserve(&deferred, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_UNWIND_DEFER_LOST);
		return 0;
	}
	id = ((__sync_fetch_and_add(&defer_seq, 1) + 1) << 2) | STACK_ID_DEFERRED;
	if (bpf_map_update_elem(&stacks, &id, st, BPF_NOEXIST) != 0) {
		/* No room: the walk stops, and its hash says the rest. */
		bpf_ringbuf_discard(e, 0);
		count(COUNTER_UNWIND_DEFER_LOST);
		return 0;
	}
	sp = w->r.sp;
	e->tgid = bpf_get_current_pid_tgid() >> 32;
	e->tid = (u32)bpf_get_current_pid_tgid();
	e->id = id;
	e->ip = w->r.ip;
	e->sp = sp;
	e->fp = w->r.fp;
	e->sp0 = w->sp0;
	e->exact = w->r.exact;
	e->at = w->deferred;
	e->nr = nr;
	bpf_probe_read_kernel(e->ips, sizeof(e->ips), st->ips);
	/*
	 * The stack from sp up: at once, or, where it ends sooner (the main
	 * thread's, whose frames are near its top), a page at a time.
	 */
	e->len = 0;
	if (bpf_probe_read_user(e->stack, DEFER_STACK, (void *)sp) == 0) {
		e->len = DEFER_STACK;
	} else {
		first = 4096 - (sp & 4095);
		if (bpf_probe_read_user(e->stack, first, (void *)sp) == 0) {
			e->len = first;
			for (i = 0; i < DEFER_STACK / 4096; i++) {
				off = first + (u64)i * 4096;
				if (off + 4096 > DEFER_STACK)
					break;
				if (bpf_probe_read_user(&e->stack[off & (DEFER_STACK - 1)], 4096, (void *)(sp + off)) != 0)
					break;
				e->len = off + 4096;
			}
		}
	}
	bpf_ringbuf_submit(e, 0);
	count(COUNTER_UNWIND_DEFERRED);
	return id;
}

/*
 * The id of the backtrace of nr frames at st (followed by a zero when
 * there are fewer than stack_depth), stored in the stacks map if it is not
 * there yet. 0 when it could not be stored (counted).
 */
static __always_inline u64 stack_id_of(struct stack *st, u32 nr, u32 truncated)
{
	u64 h = stack_hash(st, nr, truncated), *seen;

	if (stack_seen(h, &seen))
		return h;
	return stack_store(h, st, seen);
}

/*
 * Takes the current user backtrace into the stacks map, with the
 * allocator's caller as the first frame, through the CPU's scratch space;
 * at AT_NEW, with the first frame and frame pointer new's entry found
 * (new_ret, new_fp), when have_new says the thread has them. Returns the
 * stack id, or 0 when no backtrace was stored (counted).
 *
 * A global function, which the verifier checks once in each program,
 * whatever calls it: inlined, the walk, the hash and the store were
 * checked again at every call, along every path that leads to it (the
 * most of the verifier's work on the allocation probes).
 */
__noinline u64 store_stack(struct pt_regs *ctx, u32 at, u32 have_new, u64 new_ret, u64 new_fp)
{
	struct walk_buf *w = 0;
	u32 truncated = 0;
	u32 zero = 0;
	struct stack *st;
	u32 nr;
	u64 id;

	st = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!st)
		return 0;
	nr = walk_frames(ctx, st, at, have_new, new_ret, new_fp, &truncated, &w);
	if (nr == 0) {
		count(COUNTER_STACK_ERROR);
		return 0;
	}
	if (nr < stack_depth)
		st->ips[nr & (MAX_STACK_DEPTH - 1)] = 0;
	if (w && w->deferred) {
		id = defer_walk(w, nr);
		if (id)
			return id;
		/* Not handed over: it stops here, as it would have. */
		count(COUNTER_UNWIND_STOPPED);
	}
	return stack_id_of(st, nr, truncated);
}

/*
 * A uprobe program runs with migration disabled, not always with
 * preemption disabled (uprobe_multi links on a preemptible kernel):
 * another thread of the CPU could run a probe between its reads and writes
 * of the per-CPU scratch space of a backtrace, and mix two stacks. On such
 * kernels (the preemptible variable), where the kfuncs exist (6.10),
 * preemption is off while the scratch space is in use, for about 25 ns a
 * backtrace.
 */
extern void bpf_preempt_disable(void) __ksym __weak;
extern void bpf_preempt_enable(void) __ksym __weak;

#define bpf_ksym_exists(sym)                                                                      \
	({                                                                                        \
		_Static_assert(!__builtin_constant_p(!!sym), #sym " should be marked as __weak"); \
		!!sym;                                                                            \
	})

/*
 * Takes the current user backtrace, with the allocator's caller as the first
 * frame. Returns the stack id, or 0 when no backtrace was stored (counted).
 */
static __always_inline u64 take_stack(struct pt_regs *ctx, u32 at, const struct thread_state *ts)
{
	bool guard = preemptible && bpf_ksym_exists(bpf_preempt_disable) && bpf_ksym_exists(bpf_preempt_enable);
	u64 id;

	if (stack_depth == 0)
		return 0;
	if (guard)
		bpf_preempt_disable();
	id = store_stack(ctx, at, ts != 0, ts ? ts->new_ret : 0, ts ? ts->new_fp : 0);
	if (guard)
		bpf_preempt_enable();
	return id;
}

/* Whether an allocation of size bytes gets a backtrace. */
static __always_inline bool backtrace_for(u64 size)
{
	return alloc_backtraces && backtrace_on && size >= bt_min_size && size <= bt_max_size;
}

#endif /* MDTRACE_STACK_H */
