/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The free path: a block leaves the live table before the allocator can
 * reuse its address. With verify_pointers, a pointer the table does not
 * hold is an error, sent to user space.
 */
#ifndef MDTRACE_FREE_H
#define MDTRACE_FREE_H

#include "common.h"
#include "table.h"
#include "stack.h"
#include "sample.h"

/* verify_pointers: recently freed blocks, with the backtrace of their free. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct alloc_key);
	__type(value, u64);
} freed SEC(".maps");

/* The functions that check pointers, as in the error messages. */
enum check_fn {
	FN_FREE = 1,
	FN_REALLOC,
	FN_USABLE_SIZE,
};

/* A bad pointer found by verify_pointers. */
struct pointer_error {
	u32 tgid;
	u32 tid;
	u32 fn;		/* enum check_fn */
	u32 freed;	/* 1: a recently freed block; 0: unknown */
	u64 ptr;
	u64 fail_stack; /* backtrace at the failure */
	u64 free_stack; /* backtrace of the original free */
};

/* Names struct pointer_error in BTF, so that Go gets the type. */
const struct pointer_error unused_pointer_error __attribute__((unused)) = {};

/* verify_pointers errors. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} errors SEC(".maps");

#define SIGABRT 6

/*
 * Reports a bad pointer given to fn, with the failure's backtrace, from the
 * entry probe of fn.
 *
 * With abort_on_error the thread then gets SIGABRT, as Android aborts after
 * the error block. The program cannot write mdtrace's log, so the order is:
 * the error goes into the ring buffer first; the signal is acted on only
 * when the thread leaves the probe for user space, once the probed first
 * instruction of fn is stepped over and before the rest of fn runs, so the
 * bad pointer never reaches the allocator; the dying process is then held
 * at its exit stop (ptrace), where mdtrace drains the ring buffer and
 * writes the whole block before letting it go. A program that blocks or
 * catches SIGABRT gets it as any other SIGABRT.
 */
static __always_inline void pointer_error(struct pt_regs *ctx, struct alloc_key *key, u32 fn)
{
	u64 *free_stack = bpf_map_lookup_elem(&freed, key);
	struct pointer_error *e;
	bool freed_block = free_stack != 0;

	if (!freed_block && !unknown_is_error)
		return; /* maybe a block allocated before mdtrace attached */
	e = bpf_ringbuf_reserve(&errors, sizeof(*e), 0);
	if (!e) {
		/* Lost, and counted: the abort still keeps the pointer from the allocator. */
		count(COUNTER_ERRORS_LOST);
	} else {
		e->tgid = key->tgid;
		e->tid = (u32)bpf_get_current_pid_tgid();
		e->fn = fn;
		e->freed = freed_block;
		e->ptr = key->ptr;
		e->free_stack = free_stack ? *free_stack : 0;
		e->fail_stack = take_stack(ctx, AT_ENTRY, 0);
		bpf_ringbuf_submit(e, abort_on_error ? BPF_RB_FORCE_WAKEUP : 0);
	}
	/* An unknown pointer after the table overflowed may be a missed block: not an error. */
	if (abort_on_error && (freed_block || !table_full))
		bpf_send_signal_thread(SIGABRT);
}

/*
 * Whether the call at an entry probe comes from the code around the probed
 * function (the allocator calling itself): 1 or 0, or -1 when that cannot
 * be told. The probe's cookie holds, in pages, how far the executable
 * segment holding the function reaches below the probe (bits 32-47) and
 * above it (48-63); the probe is before anything moves the stack pointer.
 */
static __always_inline int from_allocator(struct pt_regs *ctx)
{
	u64 cookie = bpf_get_attach_cookie(ctx), ip = PT_REGS_IP(ctx), ret;
	u64 below = ((cookie >> 32) & 0xffff) << 12, above = (cookie >> 48) << 12;

	if (!below && !above)
		return -1;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(ctx)) != 0)
		return -1;
	return ret >= ip - below && ret < ip + above;
}

/*
 * Whether a free the table cannot account for is glibc putting an ending
 * thread's cache back into its arena: at a thread's end, after its
 * thread_local destructors begin (__call_tls_dtors), glibc frees through
 * free every block the thread's tcache holds, blocks the program freed
 * before, and then the tcache itself, which no malloc call made. Those
 * frees come from inside the allocator's own code (from_allocator); the
 * program's, in the destructors that run then, do not, and are checked as
 * any other.
 */
static __always_inline bool thread_cache_free(struct pt_regs *ctx)
{
	struct thread_state *ts = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);

	return ts && ts->ending && from_allocator(ctx) == 1;
}

/*
 * Removes a block from the live table before the allocator can hand its
 * address to another thread. With ts, the entry is kept there so that a
 * failed realloc can put it back. With check, a pointer the table does not
 * hold is reported (verify_pointers); the shim's probe sites never check,
 * as the shim checks pointers itself. Returns true for a free that is
 * glibc's at a thread's end (thread_cache_free), not the program's: it is
 * not recorded either; and, while the probes sample, with records (--stats)
 * for a free of a block the table does not hold, which no record brought.
 */
static __always_inline bool remove_alloc(struct pt_regs *ctx, u64 ptr, struct thread_state *ts, u32 fn,
					 bool check)
{
	struct alloc_key key = block_key(ptr);
	bool gone;

	if (ts) {
		gone = delete_block(&key, &ts->old) == 0;
		ts->old_valid = gone;
	} else {
		gone = delete_block(&key, 0) == 0;
	}
	if (gone) {
		count(COUNTER_FREES);
		if (verify && check) {
			u64 id = take_stack(ctx, AT_ENTRY, 0);

			bpf_map_update_elem(&freed, &key, &id, BPF_ANY);
		}
		return false;
	}
	if (check && fn == FN_FREE && thread_cache_free(ctx))
		return true;
	if (sample_bytes) {
		/*
		 * Most blocks are not sampled: a block the table does not
		 * hold is no unknown pointer (verify_pointers is refused with
		 * sampling), and is counted apart.
		 */
		count(COUNTER_UNSAMPLED_FREES);
		return record != 0;
	}
	count(COUNTER_UNKNOWN_FREES);
	if (verify && check)
		pointer_error(ctx, &key, fn);
	return false;
}

#endif /* MDTRACE_FREE_H */
