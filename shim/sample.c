// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Sampling (mdtrace --sample-bytes N, MDSHIM_SAMPLE_BYTES=N): only some
 * allocations reach the probe sites, so that the others never trap into
 * the kernel. As in heapprofd, each thread counts down the bytes it
 * allocates to the next sample, at intervals drawn from an exponential
 * distribution of mean N: an allocation of size s is sampled with
 * probability 1 - exp(-s/N), whatever came before, and mdtrace weighs it
 * by the inverse of that to estimate counts and bytes without bias. An
 * allocation of N bytes or more is always sampled, and counts as itself,
 * without moving the countdown (heapprofd's rule): large blocks are exact.
 * The probes sample by the same law when they are on the allocator
 * (bpf/sample.h).
 *
 * A free reaches the sites only for a sampled block. The sampled blocks
 * are in a pointer table, and a filter of counters in front of it answers
 * "not sampled" for almost every other pointer with one load and no lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../abi/mdtrace_abi.h"
#include "log.h"
#include "ptrtab.h"
#include "sample.h"

uint64_t md_sample_bytes;
/*
 * md_sample_bytes for another mdtrace that attaches to the process
 * (SYMBOL_SAMPLE_BYTES): the calls at the sites are a sample then, which
 * its probes must weigh as such and not sample again. The hooks read the
 * hidden word, which needs no relocation.
 */
__attribute__((visibility("default"))) volatile uint64_t mdshim_sample_bytes;

/*
 * The filter (md_sample_filter): a counter per slot of pointers, of the
 * sampled blocks. A pointer's slot (md_sample_slot) is its address in
 * 16-byte units within its 16 MB window, the window's own bits folded in:
 * blocks near each other in memory, as those a program uses together are,
 * share the filter's cache lines (a hash put each free on a line of its
 * own, a cache miss in 1 MB), and the windows of different arenas (64 MB
 * apart) do not all fall on the same slots. XOR with the window's bits
 * keeps each aligned run of 64 slots together.
 */
#define FILTER_MAX 255
uint8_t *md_sample_filter;
static struct md_ptrtab g_sampled = MD_PTRTAB_INITIALIZER;

static __thread uint64_t t_rng __attribute__((tls_model("initial-exec")));
__thread int64_t md_sample_left __attribute__((tls_model("initial-exec")));

static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

void md_sample_init(void)
{
	const char *s = getenv(ENV_SAMPLE_BYTES);
	char *end;
	unsigned long long n;

	if (s == NULL || s[0] == '\0')
		return;
	n = strtoull(s, &end, 10);
	if (*end != '\0' || n == 0 || n > (1ULL << 40)) {
		md_log('E', ENV_SAMPLE_BYTES "=%s: not a sampling interval; every allocation is reported", s);
		return;
	}
	if (!md_sample_start(n))
		md_log('E', "sampling: no memory for the filter; every allocation is reported");
}

bool md_sample_start(uint64_t n)
{
	void *f;

	if (n == 0 || n > (1ULL << 40))
		return false;
	f = mmap(NULL, (size_t)1 << MD_SAMPLE_FILTER_BITS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (f == MAP_FAILED)
		return false;
	md_sample_filter = f;
	md_sample_bytes = n;
	mdshim_sample_bytes = n;
	/* The child of a fork never inherits a held shard lock. */
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	return true;
}

static uint64_t next_u64(void)
{
	uint64_t x = t_rng;

	if (x == 0) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		x = mix64((uint64_t)(uintptr_t)&t_rng ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 40) | 1;
	}
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t_rng = x;
	return x * 0x2545f4914f6cdd1dULL;
}

/*
 * neg_ln returns -ln(u) for u in (0, 1], without libm: u = m * 2^e with m
 * in [1, 2), and ln(m) = 2 atanh(z), z = (m-1)/(m+1) in [0, 1/3], from
 * its series (error below 1e-7).
 */
static double neg_ln(double u)
{
	union {
		double d;
		uint64_t b;
	} v = { .d = u };
	int e = (int)((v.b >> 52) & 0x7ff) - 1023;
	double m, z, z2, s;

	v.b = (v.b & ~(0x7ffULL << 52)) | (1023ULL << 52);
	m = v.d;
	z = (m - 1) / (m + 1);
	z2 = z * z;
	s = z * (1 + z2 * (1.0 / 3 + z2 * (1.0 / 5 + z2 * (1.0 / 7 + z2 * (1.0 / 9 + z2 * (1.0 / 11 + z2 / 13))))));
	return -(e * 0.69314718055994530942 + 2 * s);
}

/* next_interval draws the bytes to the next sample. */
static int64_t next_interval(void)
{
	/* u in (0, 1]: 53 random bits, plus one. */
	double u = (double)((next_u64() >> 11) + 1) / 9007199254740992.0;
	double x = neg_ln(u) * (double)md_sample_bytes;

	return x < 1 ? 1 : x > 9e18 ? (int64_t)9e18 : (int64_t)x;
}

/*
 * md_sample_draw is md_sample_alloc past its fast path: the countdown of
 * the thread's bytes reaches the allocation of size bytes, or has no
 * interval yet.
 */
bool md_sample_draw(size_t size)
{
	if (md_sample_left == 0)
		md_sample_left = next_interval();
	md_sample_left -= (int64_t)size;
	if (md_sample_left > 0)
		return false;
	/* The countdown may cross several intervals: it goes on from the last. */
	while (md_sample_left <= 0)
		md_sample_left += next_interval();
	return true;
}

bool md_sample_mark(const void *p)
{
	uint8_t *c, v;

	if (p == NULL || !md_ptrtab_put(&g_sampled, p, 1))
		return false;
	c = &md_sample_filter[md_sample_slot(p)];
	v = __atomic_load_n(c, __ATOMIC_RELAXED);
	/* A counter that reaches FILTER_MAX stays there: it no longer counts. */
	while (v < FILTER_MAX && !__atomic_compare_exchange_n(c, &v, v + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return true;
}

/* md_sample_forget is md_sample_take for a pointer whose counter c is not 0. */
bool md_sample_forget(const void *p, uint8_t *c)
{
	uint8_t v;

	if (!md_ptrtab_take(&g_sampled, p, NULL))
		return false;
	v = __atomic_load_n(c, __ATOMIC_RELAXED);
	while (v > 0 && v < FILTER_MAX && !__atomic_compare_exchange_n(c, &v, v - 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return true;
}

static void fork_prepare(void)
{
	md_ptrtab_fork_prepare(&g_sampled);
}

static void fork_parent(void)
{
	md_ptrtab_fork_parent(&g_sampled);
}

static void fork_child(void)
{
	md_ptrtab_fork_child(&g_sampled);
}
