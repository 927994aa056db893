// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The shim's batched sites (batch.c) with the model of the probes
 * (site_model.c) in place of site.c, run with MDSHIM_BATCH=16 and
 * MDSHIM_CTL set, as under mdtrace:
 *
 *  - a block freed is held until its free is handed over: the next
 *    allocation of its size gets another address; a large one's free is
 *    handed over at once;
 *  - a block freed by its thread while its allocation is still in the
 *    batch, with no hand-over since, takes both calls back: the model sees
 *    neither, only their count; an older one is freed as usual;
 *  - 20000 allocations and frees reach the model exactly, a batch at a
 *    time, each allocation with its frames, the first of them in the
 *    function that called malloc;
 *  - allocations from one call site name the batch's last frames, those
 *    of an allocation taken back too;
 *  - a realloc hands the thread's batch over first;
 *  - threads that end hand their last batch over: after the joins the
 *    model holds exactly the blocks they kept.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../batch.h"
#include "check.h"
#include "site_model.h"

enum { BLOCKS = 20000, THREADS = 4, THREAD_BLOCKS = 5000, THREAD_KEPT = 10 };

/*
 * sync_realloc hands the thread's batch over: a realloc does, before its
 * own call. Through a volatile, or the compiler makes it a malloc.
 */
static void *sync_realloc(void)
{
	void *volatile none = NULL;

	return realloc(none, 1);
}

__attribute__((noinline)) void *make_block(size_t size)
{
	void *p = malloc(size);

	__asm__ volatile("" ::: "memory");
	return p;
}

static void held(void)
{
	void *volatile p = malloc(64), *volatile q;

	/* Handed over first, or the free would take the allocation back. */
	free(sync_realloc());
	free(p);
	q = malloc(64);
	CHECK(q != p, "a freed block came back before its free was handed over");
	free(q);
	free(sync_realloc());
}

/* A large block's free is handed over at once: a thread holds at most MD_BATCH_HELD_BYTES. */
static void large(void)
{
	void *volatile p = malloc(MD_BATCH_HELD_BYTES + 1), *r0 = sync_realloc();
	struct site_model_counts c0 = site_model_counts(), c;

	free(p);
	c = site_model_diff(c0, site_model_counts());
	CHECK(c.batches == 1 && c.allocs == 0 && c.frees == 1 && c.live == -1,
	      "after a free of %d bytes: %ld batches, %ld allocations, %ld frees, %ld live; want 1, 0, 1, -1",
	      MD_BATCH_HELD_BYTES + 1, c.batches, c.allocs, c.frees, c.live);
	free(r0);
}

static void exact(void)
{
	static void *blocks[BLOCKS];
	void *r0 = sync_realloc(), *r;
	struct site_model_counts c0 = site_model_counts(), c;

	for (int i = 0; i < BLOCKS; i++)
		blocks[i] = make_block(16 + (size_t)i % 512);
	for (int i = 0; i < BLOCKS; i++)
		free(blocks[i]);
	r = sync_realloc();
	c = site_model_diff(c0, site_model_counts());
	/* The realloc's block goes to the unbatched sites, after the batch. */
	CHECK(c.allocs == BLOCKS + 1 && c.frees == BLOCKS && c.live == 1, "%ld allocations, %ld frees, %ld live; want %d, %d, 1",
	      c.allocs, c.frees, c.live, BLOCKS + 1, BLOCKS);
	CHECK(c.unknown_frees == 0 && c.double_allocs == 0 && c.bad_events == 0, "%ld unknown frees, %ld double allocations, %ld bad events",
	      c.unknown_frees, c.double_allocs, c.bad_events);
	CHECK(c.framed == BLOCKS, "%ld of %d batched allocations with frames", c.framed, BLOCKS);
	/* A batch is a page: 20000 allocations of 3 + frames words, and frees. */
	CHECK(c.batches > 100 && c.batches < BLOCKS / 10, "%ld batches", c.batches);
	free(r);
	free(r0);
}

static void *hand_over(void *arg)
{
	(void)arg;
	free(make_block(5));
	free(sync_realloc());
	return NULL;
}

/*
 * Blocks freed while their allocation is in the batch: the batch's last
 * event goes, an earlier one becomes a skip; the hand-over counts them.
 * One whose allocation was written before another thread's hand-over is
 * freed as usual.
 */
static void pairs(void)
{
	void *r0 = sync_realloc(), *volatile a, *volatile b, *volatile q, *r;
	struct site_model_counts c0 = site_model_counts(), c;
	pthread_t t;

	for (int i = 0; i < 1000; i++)
		free(make_block(100 + (size_t)i % 7));
	q = make_block(1);
	r = sync_realloc();
	c = site_model_diff(c0, site_model_counts());
	CHECK(c.batches == 1 && c.paired == 1000 && c.allocs == 2 && c.frees == 0 && c.skipped == 0 && c.bad_events == 0,
	      "1000 pairs at the batch's end: %ld batches, %ld paired, %ld allocations, %ld frees, %ld skipped, %ld bad; want 1, 1000, 2, 0, 0, 0",
	      c.batches, c.paired, c.allocs, c.frees, c.skipped, c.bad_events);
	free(q);
	free(r);

	free(sync_realloc());
	c0 = site_model_counts();
	a = make_block(10);
	b = make_block(20);
	free(a);
	free(b);
	r = sync_realloc();
	c = site_model_diff(c0, site_model_counts());
	/*
	 * The model also has the realloc's block (and the batch may have the
	 * free of the one before, unless that block went unbatched, given
	 * back to glibc by this thread before).
	 */
	CHECK(c.batches == 1 && c.paired == 2 && c.skipped == 1 && c.allocs == 1 && (a == r || !site_model_live(a, NULL)) &&
		      (b == r || !site_model_live(b, NULL)),
	      "a pair inside the batch, one at its end: %ld batches, %ld paired, %ld skipped, %ld allocations; want 1, 2, 1, 1, neither block live but as the realloc's",
	      c.batches, c.paired, c.skipped, c.allocs);
	free(r);

	free(sync_realloc());
	c0 = site_model_counts();
	a = make_block(30);
	pthread_create(&t, NULL, hand_over, NULL);
	pthread_join(t, NULL);
	free(a);
	r = sync_realloc();
	c = site_model_diff(c0, site_model_counts());
	/* a's allocation and free both reach the model. */
	CHECK(c.paired == 1 && c.allocs >= 2 && c.frees >= 1 && c.unknown_frees == 0 && (a == r || !site_model_live(a, NULL)),
	      "a block allocated before another thread's hand-over: %ld paired (the other thread's), %ld allocations, %ld frees, %ld unknown, a %s; want 1, 2 or more, 1 or more, 0, not live",
	      c.paired, c.allocs, c.frees, c.unknown_frees, site_model_live(a, NULL) ? "live" : "not live");
	free(r);
	free(r0);
}

/* The first frame of a batched allocation is in the function that called malloc. */
static void frames(void)
{
	void *p = make_block(100), *r = sync_realloc();
	struct site_model_counts c = site_model_counts();
	Dl_info info;

	CHECK(dladdr((void *)c.last_frame, &info) != 0 && info.dli_sname != NULL && strcmp(info.dli_sname, "make_block") == 0,
	      "first frame %#lx is in %s, want make_block", (unsigned long)c.last_frame,
	      info.dli_sname != NULL ? info.dli_sname : "?");
	free(p);
	free(r);
}

/*
 * Allocations from one call site after the first name the batch's last
 * frames (BATCH_STACK_PREV), also when those are of an allocation taken
 * back inside the batch; one taken back at the batch's end takes its
 * frames with it, and the next allocation repeats them.
 */
static void same_site(void)
{
	void *r0 = sync_realloc(), *volatile p[3], *r;
	struct site_model_counts c0 = site_model_counts(), c;
	/* Not a constant: a loop the compiler unrolls has a call site an allocation. */
	volatile int n = 3;
	Dl_info info;

	for (int i = 0; i < n; i++) {
		p[i] = make_block(10);
		if (i == 1)
			free(p[0]);
	}
	r = sync_realloc();
	c = site_model_diff(c0, site_model_counts());
	/* The model also has the realloc's block, from the unbatched sites. */
	CHECK(c.allocs == 3 && c.skipped == 1 && c.framed == 2 && c.prev == 2 && c.bad_events == 0,
	      "three allocations from one site, the first taken back: %ld allocations, %ld skipped, %ld with frames, %ld named the last, %ld bad; want 3, 1, 2, 2, 0",
	      c.allocs, c.skipped, c.framed, c.prev, c.bad_events);
	CHECK(dladdr((void *)c.last_frame, &info) != 0 && info.dli_sname != NULL && strcmp(info.dli_sname, "make_block") == 0,
	      "first frame %#lx of the named frames is in %s, want make_block", (unsigned long)c.last_frame,
	      info.dli_sname != NULL ? info.dli_sname : "?");
	for (int i = 1; i < 3; i++)
		free(p[i]);
	free(r);

	free(sync_realloc());
	c0 = site_model_counts();
	n = 2;
	for (int i = 0; i < n; i++) {
		p[i] = make_block(10);
		if (i == 0)
			free(p[0]);
	}
	r = sync_realloc();
	c = site_model_diff(c0, site_model_counts());
	CHECK(c.allocs == 2 && c.paired == 1 && c.framed == 1 && c.prev == 0 && c.bad_events == 0,
	      "an allocation taken back at the batch's end, then one from its site: %ld allocations, %ld paired, %ld with frames, %ld named the last, %ld bad; want 2, 1, 1, 0, 0",
	      c.allocs, c.paired, c.framed, c.prev, c.bad_events);
	free(p[1]);
	free(r);
	free(r0);
}

static void *worker(void *arg)
{
	void **kept = arg;
	void *blocks[THREAD_BLOCKS];

	for (int i = 0; i < THREAD_BLOCKS; i++)
		blocks[i] = make_block(777);
	for (int i = 0; i < THREAD_BLOCKS; i++)
		free(blocks[i]);
	for (int i = 0; i < THREAD_KEPT; i++)
		kept[i] = make_block(888);
	return NULL;
}

static void threads(void)
{
	static void *kept[THREADS][THREAD_KEPT];
	pthread_t t[THREADS];
	struct site_model_counts c0, c;
	size_t size;

	free(sync_realloc());
	c0 = site_model_counts();
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, kept[i]);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	c = site_model_diff(c0, site_model_counts());
	CHECK(c.unknown_frees == 0 && c.double_allocs == 0 && c.bad_events == 0, "threads: %ld unknown frees, %ld double allocations, %ld bad events",
	      c.unknown_frees, c.double_allocs, c.bad_events);
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < THREAD_KEPT; j++)
			CHECK(site_model_live(kept[i][j], &size) && size == 888, "thread %d's block %d is not live in the model", i, j);
	CHECK(c.allocs >= THREADS * (THREAD_BLOCKS + THREAD_KEPT) && c.frees >= THREADS * THREAD_BLOCKS,
	      "threads: %ld allocations, %ld frees", c.allocs, c.frees);
	for (int i = 0; i < THREADS; i++)
		for (int j = 0; j < THREAD_KEPT; j++)
			free(kept[i][j]);
}

int main(void)
{
	if (!md_batch_on) {
		fprintf(stderr, "batching is off: run with MDSHIM_BATCH and MDSHIM_CTL set\n");
		return 1;
	}
	held();
	large();
	exact();
	pairs();
	frames();
	same_site();
	threads();
	if (failures == 0)
		printf("ok\n");
	return failures != 0;
}
