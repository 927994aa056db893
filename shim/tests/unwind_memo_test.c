// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The unwinder (unwind.c, cfi.c) against libgcc's, glibc's backtrace():
 * tens of thousands of walks from random call trees built -O2 without
 * frame pointers, each meeting the memo of the walk before at another
 * frame (the same stack; another leaf; a caller called from elsewhere at
 * the same rsp; a deeper or shallower stack; rbp-based frames of alloca;
 * a frame limit), in the main thread, in a second thread, and in a
 * SIGALRM handler that stops them anywhere, md_unwind included (the
 * handler's walks go without the memo). Every walk must give backtrace()'s
 * frames, and most walks must take frames from the one before; where
 * md_unwind_same says a walk repeats the last one, it must.
 */
#define _GNU_SOURCE
#include <alloca.h>
#include <link.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "../unwind.h"
#include "check.h"
#include "unwind_chain.h"

enum { WALKS = 30000, MAX_FRAMES = 64, MAX_DEPTH = 12 };

static __thread uintptr_t t_lo, t_hi;
static __thread unsigned t_seed;
static __thread long t_walks;
static long g_mismatches, g_handler_walks, g_replays, g_sames, g_same_mismatches, g_loader_stops;
/* The dynamic loader's text: where the walks from a signal handler may stop (probe). */
static uintptr_t g_loader_lo, g_loader_hi;
static volatile int sink, repeats = 4;
/*
 * The thread's last walk with the memo, its frames and stop, and
 * md_unwind_walks after it (0: none known); probes in the signal handler
 * keep none.
 */
static __thread uintptr_t t_prev[MAX_FRAMES];
static __thread size_t t_prev_n;
static __thread enum md_unwind_stop t_prev_why;
static __thread unsigned long t_prev_walks;
static __thread bool t_in_handler;

/*
 * probe walks from its own frame and compares with backtrace(), whose
 * first frame is in probe: md_unwind's start at probe's caller. A frame
 * stopped by a signal, and the trampoline's, are one more in md_unwind's
 * (where they stopped, as a return address) than in backtrace()'s.
 */
NOINLINE static void probe(size_t max)
{
	void *ref[MAX_FRAMES + 1];
	uintptr_t got[MAX_FRAMES], fp = (uintptr_t)__builtin_frame_address(0);
	enum md_unwind_stop why, again_why;
	size_t again_n, prefix = 0;
	/*
	 * md_unwind_same first: where it says the walk repeats the last one
	 * (with no other walk with the memo meanwhile, one of the signal
	 * handler's), the walk must give that one's frames and stop.
	 */
	unsigned long walks = md_unwind_walks;
	bool again = md_unwind_same(fp, t_lo, t_hi, max, 0, &again_n, &again_why) && walks == md_unwind_walks &&
		     walks == t_prev_walks;
	size_t n = md_unwind(fp, t_lo, t_hi, got, max, 0, &why);
	size_t m = (size_t)backtrace(ref, MAX_FRAMES + 1) - 1;
	bool same = n == (m < max ? m : max);

	if (again) {
		__atomic_fetch_add(&g_sames, 1, __ATOMIC_RELAXED);
		if ((again_n != n || again_why != why || again_n != t_prev_n || again_why != t_prev_why ||
		     memcmp(got, t_prev, n * sizeof(*got)) != 0) &&
		    __atomic_fetch_add(&g_same_mismatches, 1, __ATOMIC_RELAXED) < 3)
			fprintf(stderr, "walk %ld: md_unwind_same said %zu frames as the last walk's (stop %d), the walk gave %zu (stop %d)\n",
				t_walks, again_n, again_why, n, why);
	}
	if (!t_in_handler) {
		/* Kept only when this walk alone moved the count: a handler's walk may have come in between. */
		t_prev_walks = md_unwind_walks == walks + 1 ? md_unwind_walks : 0;
		memcpy(t_prev, got, n * sizeof(*got));
		t_prev_n = n;
		t_prev_why = why;
	}

	while (prefix < n && prefix < m && got[prefix] - (uintptr_t)ref[prefix + 1] <= 1)
		prefix++;
	same = same && prefix == n;
	/*
	 * The one rule the unwinder does not express that this test meets: the
	 * loader's lazy-binding trampoline (_dl_runtime_resolve) keeps its CFA
	 * in rbx, which only a signal frame gives. A walk from a handler that
	 * interrupted it, or a function it called, stops at its frame, said:
	 * backtrace()'s frames up to there, the last in the loader.
	 */
	if (!same && t_in_handler && why == MD_UNWIND_UNSUPPORTED && prefix == n && n > 0 && n < m &&
	    got[n - 1] - 1 >= g_loader_lo && got[n - 1] - 1 < g_loader_hi) {
		__atomic_fetch_add(&g_loader_stops, 1, __ATOMIC_RELAXED);
		same = true;
	}
	if (!same && __atomic_fetch_add(&g_mismatches, 1, __ATOMIC_RELAXED) < 3) {
		fprintf(stderr, "walk %ld: %zu frames, backtrace() %zu (max %zu):\n", t_walks, n, m, max);
		for (size_t i = 0; i < n || i < m; i++)
			fprintf(stderr, "  %#18lx %#18lx\n", i < n ? (unsigned long)got[i] : 0UL,
				i < m ? (unsigned long)ref[i + 1] : 0UL);
	}
	t_walks++;
}

static int tree(int depth, size_t max);

/* left calls tree from under an alloca of random size: an rbp-based frame, and a new rsp below it. */
NOINLINE static int left(int depth, size_t max)
{
	volatile char *pad = alloca(16 + 16 * (rand_r(&t_seed) % 4));
	int r;

	pad[0] = 1;
	r = tree(depth, max);
	sink += pad[0];
	return r + 1;
}

NOINLINE static int right(int depth, size_t max)
{
	int r = tree(depth, max);

	sink += r;
	return r + 2;
}

/* tree goes down depth calls, each from one of three places, to one of two calls of probe. */
NOINLINE static int tree(int depth, size_t max)
{
	unsigned x = (unsigned)rand_r(&t_seed);
	int r;

	if (depth == 0) {
		if (x & 1)
			probe(max);
		else
			probe(max);
		sink++;
		return 0;
	}
	switch (x % 3) {
	case 0:
		r = left(depth - 1, max);
		break;
	case 1:
		r = right(depth - 1, max);
		break;
	default:
		r = tree(depth - 1, max);
		break;
	}
	sink += r;
	return r;
}

static void stack_bounds(void)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;

	pthread_getattr_np(pthread_self(), &attr);
	pthread_attr_getstack(&attr, &addr, &size);
	pthread_attr_destroy(&attr);
	t_lo = (uintptr_t)addr;
	t_hi = t_lo + size;
}

/*
 * walks runs the random trees: a shape repeats a few times (as a loop's
 * allocations do), then changes; one in eight walks has a frame limit.
 */
static void *walks(void *arg)
{
	unsigned long replays = md_unwind_replays;

	t_seed = (unsigned)(uintptr_t)arg;
	stack_bounds();
	for (int i = 0; i < WALKS / repeats; i++) {
		unsigned shape = (unsigned)rand_r(&t_seed);
		int depth = (int)(shape % MAX_DEPTH);
		size_t max = shape % 8 == 0 ? 1 + shape / 8 % 12 : MAX_FRAMES;

		/* The same shape, from the same seed, from the same call (a loop the compiler cannot unroll). */
		for (int j = 0; j < repeats; j++) {
			t_seed = shape;
			tree(depth, max);
		}
		t_seed = shape * 2654435761u + 1;
	}
	replays = md_unwind_replays - replays;
	__atomic_fetch_add(&g_replays, (long)replays, __ATOMIC_RELAXED);
	CHECK(replays > WALKS / 2, "%lu of %d walks took frames from the one before", replays, WALKS);
	return NULL;
}

/* find_loader keeps the range of the dynamic loader's loaded segments. */
static int find_loader(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (strstr(info->dlpi_name, "/ld-linux") == NULL)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		g_loader_lo = info->dlpi_addr + ph->p_vaddr;
		g_loader_hi = g_loader_lo + ph->p_memsz;
	}
	return 1;
}

static void on_alarm(int sig)
{
	bool was = t_in_handler;

	(void)sig;
	t_in_handler = true;
	probe(MAX_FRAMES);
	t_in_handler = was;
	__atomic_fetch_add(&g_handler_walks, 1, __ATOMIC_RELAXED);
}

int main(void)
{
	struct itimerval every = {{0, 500}, {0, 500}}, off = {{0, 0}, {0, 0}};
	struct sigaction sa;
	pthread_t t;
	sigset_t alarm;
	void *prime[4];

	/* backtrace() loads libgcc on its first call, which must not be in the handler. */
	backtrace(prime, 4);
	dl_iterate_phdr(find_loader, NULL);
	CHECK(g_loader_hi != 0, "the dynamic loader was not found");
	sigemptyset(&alarm);
	sigaddset(&alarm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alarm, NULL);
	pthread_create(&t, NULL, walks, (void *)2);
	pthread_sigmask(SIG_UNBLOCK, &alarm, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &every, NULL);
	walks((void *)1);
	setitimer(ITIMER_REAL, &off, NULL);
	pthread_join(t, NULL);
	CHECK(g_mismatches == 0, "%ld walks differ from backtrace()'s", g_mismatches);
	CHECK(g_handler_walks > 0, "no walk in the signal handler");
	CHECK(g_same_mismatches == 0, "%ld of %ld walks md_unwind_same said repeat the last one do not", g_same_mismatches,
	      g_sames);
	CHECK(g_sames > WALKS / 2, "md_unwind_same said %ld of %d walks repeat the last one", g_sames, 2 * WALKS);
	if (failures == 0)
		printf("ok: %d walks in two threads, %ld from the last one's frames, %ld known to repeat it; %ld in the signal handler"
		       " (%ld stopped at the loader's lazy binding)\n",
		       2 * WALKS, g_replays, g_sames, g_handler_walks, g_loader_stops);
	return failures != 0;
}
