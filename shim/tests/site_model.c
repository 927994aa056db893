// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A model of mdtrace's probes on the shim's sites, linked into a test
 * program in place of site.c: mdshim_site_alloc and mdshim_site_free keep
 * a live table as the BPF program alloc_site does (a free or a realloc
 * removes the block before the allocator can reuse it, a failed realloc
 * puts it back) and count what the probes would see. It allocates nothing:
 * the table is a static array under a mutex. mdshim_site_batch applies a
 * batch's events in order, as the BPF program does when no free comes
 * before its block's allocation (the model is for one thread at a time
 * handing over blocks it allocated itself).
 */
#include <math.h>
#include <pthread.h>

#include "../../abi/mdtrace_abi.h"
#include "../batch.h"
#include "../sample.h"
#include "../site.h"
#include "site_model.h"

/* Slots of the live table: twice the most blocks a test keeps. */
#define SLOTS (1 << 20)

static struct slot {
	uintptr_t ptr; /* 0: empty */
	size_t size;
} g_table[SLOTS];
static pthread_mutex_t g_model_lock = PTHREAD_MUTEX_INITIALIZER;
static struct site_model_counts g_counts;
/* The frames of the last batched allocation. */
static uint64_t g_last_frames[MAX_STACK_DEPTH];
static size_t g_last_nframes;

/* The block a realloc took out of the table, per thread, as alloc_site keeps it. */
static __thread struct slot t_old;
static __thread bool t_old_valid;

static size_t home(uintptr_t p)
{
	return (size_t)(mix64(p) & (SLOTS - 1));
}

static size_t find(uintptr_t p)
{
	size_t i = home(p);

	while (g_table[i].ptr != 0 && g_table[i].ptr != p)
		i = (i + 1) & (SLOTS - 1);
	return i;
}

/* take removes p, shifting the entries after it back; false if it is not there. */
static bool take(uintptr_t p, struct slot *out)
{
	size_t i = find(p), j = i, h;

	if (g_table[i].ptr == 0)
		return false;
	*out = g_table[i];
	for (;;) {
		g_table[i].ptr = 0;
		for (;;) {
			j = (j + 1) & (SLOTS - 1);
			if (g_table[j].ptr == 0)
				return true;
			h = home(g_table[j].ptr);
			/* j's entry may move to i unless its home lies in (i, j]. */
			if (i <= j ? (h <= i || h > j) : (h <= i && h > j))
				break;
		}
		g_table[i] = g_table[j];
		i = j;
	}
}

static void put(uintptr_t p, size_t size)
{
	size_t i = find(p);

	if (g_table[i].ptr != 0)
		g_counts.double_allocs++;
	else
		g_counts.live++;
	g_table[i] = (struct slot){ p, size };
}

static void count_alloc(size_t size)
{
	/* mdtrace's weight (leak.SampleWeight): a block of the interval or more stands for itself. */
	double p = md_sample_bytes == 0 || size == 0 || size >= md_sample_bytes ?
			   1 :
			   -expm1(-(double)size / (double)md_sample_bytes);

	g_counts.allocs++;
	g_counts.bytes += size;
	g_counts.est_blocks += 1 / p;
	g_counts.est_bytes += (double)size / p;
}

void mdshim_site_alloc(void *ret, unsigned long call, unsigned long a0, unsigned long a1, uint64_t start_ns,
		       uint64_t present)
{
	uintptr_t ptr = (uintptr_t)ret;
	size_t size;

	(void)start_ns;
	(void)present;
	pthread_mutex_lock(&g_model_lock);
	switch (call) {
	case CALL_MALLOC:
		size = a0;
		break;
	case CALL_CALLOC:
		size = a0 * a1;
		break;
	case CALL_MEMALIGN:
		size = a1;
		break;
	case CALL_REALLOC:
		size = a1;
		if (a0 != 0 && ptr == 0 && size != 0 && t_old_valid) {
			put(a0, t_old.size);
			g_counts.restored++;
		}
		t_old_valid = false;
		break;
	default:
		pthread_mutex_unlock(&g_model_lock);
		return;
	}
	if (ptr != 0) {
		put(ptr, size);
		count_alloc(size);
	}
	pthread_mutex_unlock(&g_model_lock);
}

void mdshim_site_free(void *ptr, unsigned long call, uint64_t epoch)
{
	struct slot s;
	bool found;

	(void)epoch;
	pthread_mutex_lock(&g_model_lock);
	g_counts.frees++;
	found = take((uintptr_t)ptr, &s);
	if (!found)
		g_counts.unknown_frees++;
	else
		g_counts.live--;
	if (call == CALL_REALLOC) {
		t_old = s;
		t_old_valid = found;
	}
	pthread_mutex_unlock(&g_model_lock);
}

void mdshim_site_batch(struct md_batch *b, uint64_t used, uint64_t epoch, uint64_t flags)
{
	struct slot s;

	(void)epoch;
	pthread_mutex_lock(&g_model_lock);
	g_counts.batches++;
	g_counts.paired += (long)(flags >> BATCH_PAIRED_SHIFT);
	/* The batch's last frames, which an allocation with BATCH_STACK_PREV names (last_nr 0: none). */
	uint64_t last_at = 0, last_nr = 0;
	for (uint64_t at = 0; at < used && used <= BATCH_WORDS;) {
		uint64_t w0 = b->words[at], nr = (w0 >> BATCH_FRAMES_SHIFT) & BATCH_FRAMES_MASK;

		if ((w0 & BATCH_KIND_MASK) == BATCH_FREE && at + 2 <= used) {
			g_counts.frees++;
			if (take((uintptr_t)b->words[at + 1], &s))
				g_counts.live--;
			else
				g_counts.unknown_frees++;
			at += 2;
		} else if ((w0 & BATCH_KIND_MASK) == BATCH_ALLOC && nr <= md_batch_depth && at + 3 + nr <= used) {
			uint64_t f = at + 3, n = nr;

			put((uintptr_t)b->words[at + 1], b->words[at + 2]);
			count_alloc(b->words[at + 2]);
			if (nr > 0) {
				last_at = f;
				last_nr = nr;
			} else if (w0 & BATCH_STACK_PREV) {
				if (last_nr == 0) {
					g_counts.bad_events++;
					break;
				}
				f = last_at;
				n = last_nr;
				g_counts.prev++;
			}
			if (n > 0) {
				g_counts.framed++;
				g_counts.last_frame = b->words[f];
			}
			for (uint64_t i = 0; i < n; i++)
				g_last_frames[i] = b->words[f + i];
			g_last_nframes = n;
			at += 3 + nr;
		} else if ((w0 & BATCH_KIND_MASK) == BATCH_SKIP && nr <= md_batch_depth && at + 3 + nr <= used) {
			g_counts.skipped++;
			if (nr > 0) {
				last_at = at + 3;
				last_nr = nr;
			}
			at += 3 + nr;
		} else {
			g_counts.bad_events++;
			break;
		}
	}
	pthread_mutex_unlock(&g_model_lock);
}

struct site_model_counts site_model_counts(void)
{
	struct site_model_counts c;

	pthread_mutex_lock(&g_model_lock);
	c = g_counts;
	pthread_mutex_unlock(&g_model_lock);
	return c;
}

struct site_model_counts site_model_diff(struct site_model_counts a, struct site_model_counts b)
{
	return (struct site_model_counts){
		.allocs = b.allocs - a.allocs,
		.frees = b.frees - a.frees,
		.unknown_frees = b.unknown_frees - a.unknown_frees,
		.double_allocs = b.double_allocs - a.double_allocs,
		.restored = b.restored - a.restored,
		.live = b.live - a.live,
		.bytes = b.bytes - a.bytes,
		.est_blocks = b.est_blocks - a.est_blocks,
		.est_bytes = b.est_bytes - a.est_bytes,
		.batches = b.batches - a.batches,
		.framed = b.framed - a.framed,
		.prev = b.prev - a.prev,
		.bad_events = b.bad_events - a.bad_events,
		.skipped = b.skipped - a.skipped,
		.paired = b.paired - a.paired,
		.last_frame = b.last_frame,
	};
}

size_t site_model_last_frames(uint64_t *out, size_t max)
{
	size_t n;

	pthread_mutex_lock(&g_model_lock);
	n = g_last_nframes < max ? g_last_nframes : max;
	for (size_t i = 0; i < n; i++)
		out[i] = g_last_frames[i];
	pthread_mutex_unlock(&g_model_lock);
	return n;
}

bool site_model_live(const void *p, size_t *size)
{
	size_t i;
	bool ok;

	pthread_mutex_lock(&g_model_lock);
	i = find((uintptr_t)p);
	ok = g_table[i].ptr != 0;
	if (ok && size != NULL)
		*size = g_table[i].size;
	pthread_mutex_unlock(&g_model_lock);
	return ok;
}
