/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Sampling in the probes (--sample-bytes N with probes on the allocator:
 * -p, --program, --no-preload, --all): the same statistics as the shim's
 * (shim/sample.c), as heapprofd's. Each thread counts down the bytes it
 * allocates to the next sample, at intervals drawn from an exponential
 * distribution of mean N, so that a block of s bytes is sampled with
 * probability 1 - exp(-s/N), independently of every other; a block of N
 * bytes or more is always sampled and stands for itself alone. An
 * allocation not sampled takes no backtrace and no entry in the live table.
 */
#ifndef MDTRACE_SAMPLE_H
#define MDTRACE_SAMPLE_H

#include "common.h"

/* The mean interval in bytes between samples; 0: every allocation counts. */
const volatile u64 sample_bytes = 0;

/*
 * NEG_LN_STEPS + 1 values of -ln(m) for m = 1/2 + i/(2 NEG_LN_STEPS), in
 * units of 2^-32, written by user space (tracer/sample.go), which has a
 * logarithm: BPF has neither floating point nor a log.
 */
#define NEG_LN_STEPS 1024
const volatile u32 neg_ln[NEG_LN_STEPS + 1] = {};

/* ln(2) in units of 2^-32. */
#define LN2_Q32 2977044472ULL

/*
 * Draws an exponentially distributed interval of mean sample_bytes, at
 * least 1. For u uniform in (0, 1), written u = 2^-k m with m in [1/2, 1),
 * -ln(u) = k ln(2) - ln(m): k, the leading zero bits of 64 random bits,
 * gives the tail exactly, as far as 64 bits reach (-ln(2^-64) = 44 mean
 * intervals), and -ln(m), which stays within (0, ln 2], comes from the
 * table, interpolated linearly from its next 32 bits. The error of the
 * interpolation is below 1.2e-7 (h^2/8 times -ln's second derivative,
 * at most 4 on [1/2, 1]), the shim's series' own (1e-7): a table of
 * -ln(u) values alone, without the exact split of the tail, would cut the
 * distribution at its last entry and bias the large intervals.
 */
static __always_inline s64 sample_interval(void)
{
	u64 x = ((u64)bpf_get_prandom_u32() << 32) | bpf_get_prandom_u32();
	u64 k = 0, t, lo, hi, frac, nh, nl, th, tl, n;
	u32 i;

	if (x == 0)
		return (s64)(sample_bytes * 44);
	/* Leading zeros, by halves: BPF has no such instruction. */
	if (!(x >> 32)) { k += 32; x <<= 32; }
	if (!(x >> 48)) { k += 16; x <<= 16; }
	if (!(x >> 56)) { k += 8; x <<= 8; }
	if (!(x >> 60)) { k += 4; x <<= 4; }
	if (!(x >> 62)) { k += 2; x <<= 2; }
	if (!(x >> 63)) { k += 1; x <<= 1; }
	/* m = x / 2^64: its top bit is set; the next 10 pick the entry. */
	i = (x >> 53) & (NEG_LN_STEPS - 1);
	frac = (x >> 21) & 0xffffffffULL;
	hi = neg_ln[i];
	lo = neg_ln[i + 1];
	t = k * LN2_Q32 + hi - (((hi - lo) * frac) >> 32);
	/* n * t / 2^32 without 128-bit products: t < 2^38, n <= 2^40. */
	n = sample_bytes;
	nh = n >> 32;
	nl = n & 0xffffffffULL;
	th = t >> 32;
	tl = t & 0xffffffffULL;
	n = ((nh * th) << 32) + nh * tl + nl * th + ((nl * tl) >> 32);
	return n ? (s64)n : 1;
}

/*
 * Whether an allocation of size bytes by the thread is sampled, its
 * countdown moved on. A sample's block ends where the countdown crossed
 * one or more sample points; the distance from its end to the next point
 * is exponential of mean N again (the process has no memory), so one draw
 * replaces the shim's loop over the points it crossed.
 */
static __always_inline bool sample_alloc(struct thread_state *ts, u64 size)
{
	size = live_size(size);
	if (size >= sample_bytes)
		return true;
	if (ts->sample_left <= 0)
		ts->sample_left = sample_interval();
	ts->sample_left -= (s64)size;
	if (ts->sample_left > 0) {
		count(COUNTER_UNSAMPLED);
		return false;
	}
	ts->sample_left = sample_interval();
	return true;
}

/*
 * The processes whose shim samples by itself (launched by another mdtrace
 * with --sample-bytes, SYMBOL_SAMPLE_BYTES): the calls at their sites are
 * a sample already, which mdtrace weighs with the shim's interval, and
 * sampling them again would make the estimates wrong. Value: 1.
 */
struct process_map shim_samples SEC(".maps");

/*
 * Whether an allocation of size bytes reported at the shim's unbatched
 * sites is sampled: a process that has the shim, attached to with -p or
 * --all, and whose shim does not sample by itself.
 */
static __always_inline bool site_sampled(u64 size)
{
	struct thread_state *ts;
	u32 tgid;

	if (!sample_bytes)
		return true;
	tgid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_lookup_elem(&shim_samples, &tgid))
		return true;
	ts = thread_state();
	return !ts || sample_alloc(ts, size);
}

#endif /* MDTRACE_SAMPLE_H */
