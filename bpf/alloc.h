/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The allocation path: a block enters the live table with its backtrace.
 * The calls in flight: what the entry probe of an allocator call keeps for
 * its return probe, and the calls the allocator makes inside it.
 */
#ifndef MDTRACE_ALLOC_H
#define MDTRACE_ALLOC_H

#include "common.h"
#include "table.h"
#include "stack.h"
#include "free.h"
#include "sample.h"

/* Adds a live allocation; false if the table had no room (counted). */
static __always_inline bool insert_keyed(const struct alloc_key *key, const struct alloc_info *info)
{
	if (put_block(key, info, BPF_ANY) == 0)
		return true;
	count(COUNTER_TABLE_FULL);
	table_full = 1;
	/*
	 * A block freed before at this address is live again, if untracked:
	 * its free is not a use after free.
	 */
	if (verify)
		bpf_map_delete_elem(&freed, key);
	return false;
}

/*
 * Adds a live allocation of the current process with its backtrace's id;
 * false if the table had no room (counted).
 */
static __always_inline bool insert_block(u64 ptr, u64 size, u64 stack_id)
{
	struct alloc_key key = block_key(ptr);
	struct alloc_info info = {
		.size = live_size(size),
		.stack_id = stack_id,
	};

	if (have_zygotes && bpf_map_lookup_elem(&zygotes, &key.tgid))
		info.size |= ALLOC_ZYGOTE;
	if (!insert_keyed(&key, &info))
		return false;
	count(COUNTER_ALLOCS);
	return true;
}

/*
 * Adds a live allocation made by the current thread, with its backtrace
 * taken as at says; returns the backtrace's id (0: none), for its record.
 */
static __always_inline u64 add_alloc(struct pt_regs *ctx, u64 ptr, u64 size, u32 at,
				     const struct thread_state *ts)
{
	u64 stack_id = backtrace_for(live_size(size)) ? take_stack(ctx, at, ts) : 0;

	insert_block(ptr, size, stack_id);
	return stack_id;
}

/*
 * Puts back the block of a failed realloc, which keeps it: the entry probe
 * took it out of the table and counted it freed, and it was not.
 */
static __always_inline void keep_block(u64 ptr, const struct alloc_info *old)
{
	struct alloc_key key = block_key(ptr);

	if (put_block(&key, old, BPF_NOEXIST) == 0)
		count_by(COUNTER_FREES, -1ULL);
}

/*
 * Whether a call at stack pointer sp is inside the thread's call in flight:
 * below it, or at the same stack pointer (a tail call). The allocator calls
 * itself (realloc(NULL, n) calls malloc, an operator delete free): the
 * outer call accounts for it.
 */
static __always_inline bool inside_call(const struct thread_state *ts, u64 sp)
{
	return ts->call != CALL_NONE && sp <= ts->entry_sp;
}

/*
 * Whether a call below the one in flight is inside it. One from the
 * program's code is not: the call in flight never returned (the program
 * left it by a longjmp, out of a signal handler), and this one replaces
 * it; else the thread's next allocations would count as nested until its
 * stack came back above the stale call's, and be missed. A tail call (the
 * same stack pointer) is the allocator's.
 */
static __always_inline bool nested_in(struct pt_regs *ctx, const struct thread_state *ts, u64 sp)
{
	return inside_call(ts, sp) && (sp == ts->entry_sp || from_allocator(ctx) != 0);
}

/*
 * Whether the current call is inside one in flight (an operator delete
 * calling free), without creating the thread's state: it is not counted.
 */
static __always_inline bool nested(struct pt_regs *ctx)
{
	struct thread_state *ts = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);

	if (!ts || !nested_in(ctx, ts, PT_REGS_SP(ctx)))
		return false;
	count(COUNTER_NESTED);
	return true;
}

/* How far below a C++ runtime's operator new its allocation call may be. */
#define NEW_FRAME_MAX 256

/*
 * The entry of a C++ runtime's operator new, probed for backtraces only:
 * the allocation call it makes (malloc, aligned_alloc) takes its caller
 * and frame pointer from here (AT_NEW). A new inside another (nothrow new
 * calling new, new[] jumping to new) keeps the outer one's.
 */
static __always_inline int runtime_new(struct pt_regs *ctx, u64 cookie)
{
	struct thread_state *ts = thread_state();
	/*
	 * The probe may sit past a "sub $n,%rsp": the cookie's high half is
	 * n, and the entry's stack pointer is n bytes up.
	 */
	u64 delta = cookie >> 32, sp = PT_REGS_SP(ctx) + delta;

	if (!ts || delta >= NEW_FRAME_MAX)
		return 0;
	if (ts->new_sp && sp <= ts->new_sp && ts->new_sp - sp < NEW_FRAME_MAX)
		return 0;
	if (bpf_probe_read_user(&ts->new_ret, sizeof(ts->new_ret), (void *)sp) != 0) {
		ts->new_sp = 0;
		return 0;
	}
	ts->new_sp = sp;
	ts->new_fp = PT_REGS_FP(ctx);
	return 0;
}

/* a times b, or ~0 (more than any block) when the product overflows. */
static __always_inline u64 size_product(u64 a, u64 b)
{
	u64 n = a * b;

	/* The barrier keeps clang from turning the check into a 128-bit multiply. */
	barrier_var(n);
	if (b != 0 && n / b != a)
		return ~0ULL;
	return n;
}

/*
 * The size an allocator call at its entry asks for, by its arguments as
 * alloc_return reads them; 0 for a call that allocates nothing.
 */
static __always_inline u64 call_size(u32 call, u64 a0, u64 a1, u64 a2)
{
	switch (call) {
	case CALL_MALLOC:
	case CALL_NEW_ALIGNED:
	case CALL_VALLOC:
		return live_size(a0);
	case CALL_CALLOC:
		return live_size(size_product(a0, a1));
	case CALL_REALLOC:
		return live_size(a1);
	case CALL_REALLOCARRAY:
		return live_size(size_product(a1, a2));
	case CALL_MEMALIGN:
		return live_size(a1);
	case CALL_POSIX_MEMALIGN:
		return live_size(a2);
	case CALL_PVALLOC:
		return a0 > ~0ULL - page_size ? ~0ULL : live_size((a0 + page_size - 1) & ~(page_size - 1));
	}
	return 0;
}

/*
 * count_first starts the count of a process counted from the audit's
 * start (an exec starts it at count_from_exec): its program from its mm.
 */
static __always_inline void count_first(u32 tgid)
{
	struct task_struct___md *t = (void *)bpf_get_current_task_btf();
	struct proc_count first = {.calls = 1};
	struct mm_struct___md *mm;
	struct file___md *exe;
	long err;

	if (bpf_probe_read_kernel(&mm, sizeof(mm), &t->mm) != 0 || !mm ||
	    bpf_probe_read_kernel(&exe, sizeof(exe), &mm->exe_file) != 0 || !program_file_of(exe, &first.file))
		__builtin_memset(&first.file, 0, sizeof(first.file));
	err = bpf_map_update_elem(&proc_calls, &tgid, &first, BPF_NOEXIST);
	/* -EEXIST: another thread's first call came first. Else no room: said, as the process is never taken. */
	if (err != 0 && err != -EEXIST)
		count(COUNTER_CALLS_UNCOUNTED);
}

/*
 * count_call counts a call of the current process at the allocator's
 * entry probes (count_calls), and tells user space when the count reaches
 * soon_calls, and busy_calls.
 */
static __always_inline void count_call(void)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32, soon;
	struct proc_count *n = bpf_map_lookup_elem(&proc_calls, &tgid);
	u64 calls;

	if (!n) {
		count_first(tgid);
		return;
	}
	calls = __sync_fetch_and_add(&n->calls, 1) + 1;
	if (calls == busy_calls) {
		bpf_ringbuf_output(&busy, &tgid, sizeof(tgid), BPF_RB_FORCE_WAKEUP);
	} else if (calls == soon_calls) {
		soon = tgid | BUSY_SOON;
		bpf_ringbuf_output(&busy, &soon, sizeof(soon), BPF_RB_FORCE_WAKEUP);
	}
}

static __always_inline int enter(struct pt_regs *ctx, u32 call, u64 a0, u64 a1, u64 a2)
{
	struct thread_state *ts = thread_state();
	u64 sp = PT_REGS_SP(ctx);

	if (!ts)
		return 0;
	if (nested_in(ctx, ts, sp)) {
		count(COUNTER_NESTED);
		return 0;
	}
	/* The call in flight returned without its return probe. */
	if (ts->call != CALL_NONE)
		count(COUNTER_MISSED_RETURN);
	/* A call inside a runtime's operator new takes new's first frame. */
	ts->from_new = ts->new_sp && sp < ts->new_sp && ts->new_sp - sp < NEW_FRAME_MAX;
	ts->new_sp = 0;
	ts->call = call;
	ts->args[0] = a0;
	ts->args[1] = a1;
	ts->args[2] = a2;
	ts->entry_sp = sp;
	ts->old_valid = 0;
	/*
	 * Sampling is decided here, where the size is known: a call not
	 * sampled stays in flight (the calls inside it are still its own),
	 * and its return probe only ends it.
	 */
	ts->unsampled = 0;
	if (sample_bytes && call != CALL_FREE && call != CALL_DELETE && !sample_alloc(ts, call_size(call, a0, a1, a2)))
		ts->unsampled = 1;
	/* Reading the clock costs 60 ns on a VM (kvm-clock); only records need it. */
	if (record)
		ts->start_ns = bpf_ktime_get_ns();
	/* PRESENT_BYTES of the old block, before the call can free it. */
	ts->present = 0;
	if (record && a0 != 0 && (call == CALL_REALLOC || call == CALL_REALLOCARRAY || call == CALL_FREE) &&
	    (bpf_get_attach_cookie(ctx) & CALL_GLIBC_CHUNKS))
		ts->present = present_bytes(a0);
	if ((call == CALL_REALLOC || call == CALL_REALLOCARRAY) && a0 != 0)
		remove_alloc(ctx, a0, ts, FN_REALLOC, true);
	else if ((call == CALL_FREE || call == CALL_DELETE) && a0 != 0 && remove_alloc(ctx, a0, 0, FN_FREE, true))
		ts->call = CALL_NONE; /* glibc's free at a thread's end is not the program's call */
	return 0;
}

#endif /* MDTRACE_ALLOC_H */
