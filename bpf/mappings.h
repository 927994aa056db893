/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The anonymous memory the allocator maps for itself: what the reachability
 * check reads as heap, never as roots. jemalloc and tcmalloc keep their
 * metadata (extent records, radix trees, span lists) in anonymous mappings
 * that hold the address of every extent, and so of blocks; read as roots,
 * they would make every lost block look reachable. Android's allocators
 * name those mappings ([anon:libc_malloc]) for libmemunreachable; on Linux
 * mdtrace learns them as they are made: an anonymous mmap (or mremap) made
 * while a thread is inside an allocator call the probes saw enter. Every
 * munmap, mremap and MAP_FIXED mapping of a traced process takes its range
 * out again, whoever makes it.
 */
#ifndef MDTRACE_MAPPINGS_H
#define MDTRACE_MAPPINGS_H

#include "common.h"

/* The x86-64 system calls' numbers. */
#define NR_MMAP 9
#define NR_MUNMAP 11
#define NR_MREMAP 25

#define MAP_FIXED 0x10
#define MAP_ANONYMOUS 0x20
#define MAP_FIXED_NOREPLACE 0x100000

/* An event of [start, start + len): kind is an enum mapping_kind (abi/). */
struct mapping_event {
	u32 tgid;
	u32 kind;
	u64 start, len;
};

/* Names struct mapping_event in BTF, so that Go gets the type. */
const struct mapping_event unused_mapping_event __attribute__((unused)) = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} mappings SEC(".maps");

static __always_inline void mapping_event(u32 tgid, u32 kind, u64 start, u64 len)
{
	struct mapping_event *e = bpf_ringbuf_reserve(&mappings, sizeof(*e), 0);

	if (!e) {
		count(COUNTER_MAPPINGS_LOST);
		return;
	}
	e->tgid = tgid;
	e->kind = kind;
	e->start = start;
	e->len = len;
	bpf_ringbuf_submit(e, 0);
}

/* The traced process of the current thread, or 0. */
static __always_inline u32 traced_tgid(void)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;

	return bpf_map_lookup_elem(&traced, &tgid) ? tgid : 0;
}

/*
 * Whether the thread (its state ts) is inside an allocator call: one the
 * entry probe saw, whose stack pointer the system call's (the user's, in
 * regs) is below. A call whose return probe never ran has its stack
 * pointer at or below the thread's once the thread is back in the program.
 */
static __always_inline bool in_allocator(const struct thread_state *ts, const struct pt_regs *regs)
{
	u64 sp = 0;

	if (!ts || ts->call == CALL_NONE)
		return false;
	if (bpf_probe_read_kernel(&sp, sizeof(sp), &regs->sp) != 0)
		return false;
	return sp < ts->entry_sp;
}

/* The thread's state, if it has one, without making it. */
static __always_inline struct thread_state *thread_state_if_any(void)
{
	return bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
}

/* A register of the system call's, from the kernel's memory. */
static __always_inline u64 syscall_arg(const unsigned long *field)
{
	u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), field);
	return v;
}

#endif /* MDTRACE_MAPPINGS_H */
