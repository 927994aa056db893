//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Empty uprobe programs: the floor that `make bench` measures mdtrace
 * against, the cost of the probe hits alone.
 */
#include "headers/mdtrace_types.h"
#include "headers/bpf_helpers.h"
#include "headers/bpf_tracing.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("uprobe")
int empty_probe(struct pt_regs *ctx)
{
	return 0;
}

/*
 * The same, counting its hits: tracer.MeasureTrapCost checks that every
 * call it timed was probed.
 */
volatile __u64 hits = 0;

SEC("uprobe")
int count_probe(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&hits, 1);
	return 0;
}
