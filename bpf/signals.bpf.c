//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Counts the signals generated for mdtrace itself, by number, from
 * signal_first to signal_first + SIGNAL_SLOTS - 1 (malloc debug's 45 to
 * 49). The Go runtime merges a signal that comes again before mdtrace has
 * taken it; these counts say how many came.
 */
#include "headers/mdtrace_types.h"
#include "headers/bpf_helpers.h"
#include "headers/bpf_tracing.h"
#include "headers/bpf_core_read.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define SIGNAL_SLOTS 8

/* Set at load: mdtrace's tgid and the first signal counted. */
const volatile u32 signal_tgid = 0;
const volatile u32 signal_first = 45;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SIGNAL_SLOTS);
	__type(key, u32);
	__type(value, u64);
} signal_counts SEC(".maps");

struct task_struct___sig {
	int tgid;
} __attribute__((preserve_access_index));

/* include/trace/events/signal.h: what became of the signal. */
#define TRACE_SIGNAL_DELIVERED 0
#define TRACE_SIGNAL_LOSE_INFO 4

/*
 * signal_generate(int sig, struct kernel_siginfo *info, struct task_struct
 * *task, int group, int result): a signal queued for task, or not.
 */
SEC("raw_tp/signal_generate")
int count_signal(u64 *ctx)
{
	u32 slot = (u32)ctx[0] - signal_first;
	int result = (int)ctx[4];
	struct task_struct___sig *task = (void *)ctx[2];
	u64 *n;

	if (slot >= SIGNAL_SLOTS)
		return 0;
	/* Signals the kernel dropped (a full queue) or ignored never reach mdtrace. */
	if (result != TRACE_SIGNAL_DELIVERED && result != TRACE_SIGNAL_LOSE_INFO)
		return 0;
	if ((u32)BPF_CORE_READ(task, tgid) != signal_tgid)
		return 0;
	n = bpf_map_lookup_elem(&signal_counts, &slot);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
