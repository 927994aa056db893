/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * record_allocs: every allocator call, sent to user space for the record
 * file of its process.
 */
#ifndef MDTRACE_RECORD_H
#define MDTRACE_RECORD_H

#include "common.h"

/* One allocator call, for record_allocs. */
struct record_event {
	u64 start_ns; /* CLOCK_MONOTONIC at the entry probe; 0 for thread_done */
	u64 end_ns;   /* at the return probe */
	u64 ptr;      /* result (free: the freed pointer) */
	u64 size;     /* size asked for (calloc: element size) */
	u64 arg;      /* calloc: count; memalign: alignment; realloc: old pointer */
	u64 present;  /* free and realloc: the old block's PRESENT_BYTES plus one; 0: none */
	u64 stack_id; /* a new block's backtrace in the stacks map (--stats); 0: none */
	u32 tid;
	u32 type; /* enum record_type (abi/mdtrace_abi.h) */
	u32 tgid; /* the process, whose record file the call goes to */
	u32 pad;
};

/* Names struct record_event in BTF, so that Go gets the type. */
const struct record_event unused_record_event __attribute__((unused)) = {};

/* record_allocs events; the size is set by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} records SEC(".maps");

/* Whether calls are being recorded: the probes send records. */
static __always_inline bool recording(void)
{
	return record && record_on;
}

/*
 * Sends the record of a call that ended at end_ns (0: now), with the
 * backtrace of the block it made, if any.
 */
static __always_inline void emit_stack(u32 type, u64 ptr, u64 size, u64 arg, u64 start_ns, u64 present, u64 stack_id,
				       u64 end_ns)
{
	struct record_event *e;
	u64 pid_tgid;

	if (!recording())
		return;
	e = bpf_ringbuf_reserve(&records, sizeof(*e), 0);
	if (!e) {
		count(COUNTER_RECORDS_LOST);
		return;
	}
	e->start_ns = start_ns;
	e->end_ns = end_ns ? end_ns : bpf_ktime_get_ns();
	e->ptr = ptr;
	e->size = size;
	e->arg = arg;
	e->present = present;
	e->stack_id = stack_id;
	pid_tgid = bpf_get_current_pid_tgid();
	e->tid = (u32)pid_tgid;
	e->tgid = pid_tgid >> 32;
	e->pad = 0;
	e->type = type;
	/*
	 * A wakeup per record cost the traced thread as much as the probe
	 * (an irq_work and a wakeup of the reader): records are read when
	 * the reader looks, every 100 ms or when mdtrace writes them, and
	 * the reader is woken only once the buffer is a quarter full.
	 */
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) >= record_wakeup_bytes ?
				      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline void emit_present(u32 type, u64 ptr, u64 size, u64 arg, u64 start_ns, u64 present)
{
	emit_stack(type, ptr, size, arg, start_ns, present, 0, 0);
}

static __always_inline void emit(u32 type, u64 ptr, u64 size, u64 arg, u64 start_ns)
{
	emit_stack(type, ptr, size, arg, start_ns, 0, 0, 0);
}

/* The most pages a block's PRESENT_BYTES looks at: past them, none is written. */
#define PRESENT_MAX_PAGES (1 << 18)

struct present_walk {
	u64 ptr, end, page;
	u64 present;
};

/*
 * One page of a block: a read of one of its bytes there fails when the
 * page is not resident (a read by the probes never faults a page in), as
 * /proc/PID/pagemap's present bit says.
 */
static long present_step(u32 i, void *arg)
{
	struct present_walk *w = arg;
	u64 lo = w->page + (u64)i * page_size, hi = lo + page_size;
	char c;

	if (lo >= w->end)
		return 1;
	if (lo < w->ptr)
		lo = w->ptr;
	if (hi > w->end)
		hi = w->end;
	if (bpf_probe_read_user(&c, 1, (void *)lo) == 0)
		w->present += hi - lo;
	return 0;
}

/*
 * present_bytes is PRESENT_BYTES plus one of glibc's block at ptr, read
 * before it is freed or reallocated, as Android's GetPresentBytes: its
 * usable size from the chunk header, and how many of those bytes are on
 * resident pages; 0 when it cannot be told.
 */
static __always_inline u64 present_bytes(u64 ptr)
{
	struct present_walk w = { .ptr = ptr };
	u64 head, usable, pages;

	if (bpf_probe_read_user(&head, sizeof(head), (void *)(ptr - 8)) != 0)
		return 0;
	usable = (head & ~7ULL) - (head & 2 ? 16 : 8);
	if ((s64)usable <= 0)
		return 0;
	w.end = ptr + usable;
	w.page = ptr & ~(page_size - 1);
	pages = (w.end - 1 - w.page) / page_size + 1;
	if (pages > PRESENT_MAX_PAGES)
		return 0;
	bpf_loop((u32)pages, present_step, &w, 0);
	return w.present + 1;
}

#endif /* MDTRACE_RECORD_H */
