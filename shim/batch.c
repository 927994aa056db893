// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Batched probe sites (MDSHIM_BATCH=depth, set by mdtrace): instead of one
 * probe hit per call, each thread writes its allocations and frees, with
 * the frames of their backtraces, into a buffer of its own, and hands the
 * whole buffer to mdtrace through one call of mdshim_site_batch when it is
 * full. A hit costs about as much as ten calls of the allocator; a batch
 * holds dozens of calls.
 *
 * Two rules keep the live table that the probes build from the batches
 * right:
 *
 *  - A block a thread frees is not given back to the allocator until its
 *    free has been handed over: no other thread can get the same address,
 *    and report it, before the probes have seen the free. The buffer holds
 *    the blocks (held[]); a flush frees them.
 *  - A block allocated by one thread can be freed by another one whose
 *    batch is handed over first. The probes then keep that free aside,
 *    with the batch's epoch (a counter every flush moves on), and an
 *    allocation of the same address that arrives later cancels against it
 *    if it was made before that epoch: each event carries the epoch it was
 *    written in.
 *
 * Most blocks live briefly: a thread that frees a block whose allocation
 * is still in its batch, written in the current epoch, takes both calls
 * back (pair()). No other thread can have had the block meanwhile (a free
 * by another thread is held until a hand-over, which moves the epoch on),
 * so the probes would only have added the block and removed it again;
 * the block goes back to the allocator at once, as it would natively. The
 * hand-over counts these pairs in its flags' high bits.
 *
 * mdtrace reads the buffers of a process that is stopped or being dumped
 * (struct md_batch is its ABI), and its probes drain the buffer of a
 * thread that ends without flushing. A thread uses the unbatched sites
 * (flushing its buffer first) for realloc, for calls made on a stack whose
 * bounds it does not know (a signal's alternate stack, a coroutine's), and
 * for calls made inside one of its own batched calls (a signal handler
 * that allocates). Nothing here calls the program's allocator except
 * pthread_getattr_np, once per thread, as an internal call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../abi/mdtrace_abi.h"
#include "backtrace.h"
#include "batch.h"
#include "debug.h"
#include "log.h"
#include "real.h"
#include "site.h"
#include "unwind.h"

bool md_batch_on;

bool md_early;
volatile uint32_t mdshim_ready;
/* The buffers not registered yet in an early start (struct md_batch_thread's early_slot). */
__attribute__((visibility("default"))) volatile uint64_t mdshim_early_batches[EARLY_BATCHES];

/* Whether backtraces are on, as mdtrace last said (BACKTRACE_STATE_*); 0 until it does. */
__attribute__((visibility("default"))) volatile uint8_t mdshim_backtrace_state;
/* SYMBOL_INTERFACE: the interface this shim was built for. */
__attribute__((visibility("default"), used)) const uint32_t mdshim_interface = SHIM_INTERFACE;

unsigned md_batch_depth;

/*
 * glibc's free checks a pointer before it takes the block, and aborts
 * there on a double or an invalid free. A free the batch holds reaches
 * glibc only when the batch is handed over, where glibc's abort would come
 * later than natively, after code the program never runs natively. So a
 * batched free whose pointer glibc would refuse goes to the unbatched site
 * and to glibc at once (after the thread's batch): see suspect(). g_glibc
 * tells whether the allocator is glibc's; g_tcache_key is the word glibc
 * writes at offset 8 of a block in its thread cache (learned at start) and
 * g_held_key the one the batch writes there in a block it holds, which
 * glibc would also overwrite.
 */
static bool g_glibc;
static uintptr_t g_tcache_key, g_held_key;
/*
 * A thread arena's heaps are HEAP_MAX_SIZE bytes apart and aligned to it
 * (64-bit glibc), unless glibc.malloc.hugetlb=2 makes them of huge pages:
 * g_heaps_known says whether a chunk's heap can be found.
 */
#define HEAP_MAX_SIZE (64UL << 20)
static bool g_heaps_known;
extern void *__curbrk;

static uint64_t g_epoch = 1;

uint32_t *md_batch_pending;

static inline unsigned pending_slot(const void *ptr)
{
	return (unsigned)(((uintptr_t)ptr * 0x9e3779b97f4a7c15ULL) >> (64 - INJECT_PENDING_BITS));
}

/* pending_done counts off the allocations of a batch just handed over (md_batch_pending). */
static void pending_done(const struct md_batch *b, uint64_t used)
{
	for (uint64_t at = 0; at < used;) {
		uint64_t w0 = b->words[at], nr = (w0 >> BATCH_FRAMES_SHIFT) & BATCH_FRAMES_MASK;

		switch (w0 & BATCH_KIND_MASK) {
		case BATCH_FREE:
			at += 2;
			continue;
		case BATCH_ALLOC:
			if (at + 1 < used)
				__atomic_sub_fetch(&md_batch_pending[pending_slot((const void *)(uintptr_t)b->words[at + 1])], 1,
						   __ATOMIC_RELEASE);
			break;
		}
		at += 3 + nr;
	}
}
static pthread_mutex_t g_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct md_batch_thread *g_registry;
static pthread_key_t g_key;
static size_t (*g_usable_size)(void *);

/* A thread whose buffer is gone for good (after its key's destructor). */
#define RETIRED ((struct md_batch_thread *)1)

static __thread struct md_batch_thread *t_batch __attribute__((tls_model("initial-exec")));

/*
 * A free of a block that the thread took back with its allocation (pair())
 * and gave to glibc at once, and that no batched allocation of the thread
 * has returned since, is most likely a double free: glibc may catch it
 * only at once (a fast bin's first block, a chunk of another arena), so it
 * goes to the unbatched site and glibc at once. The blocks are kept by a
 * hash of their address, the newest in a slot winning; a block another
 * thread got back from glibc meanwhile and passed on merely goes
 * unbatched. Blocks a hand-over gives back are not kept: those are the
 * frees of blocks passed between threads, mostly, whose addresses come
 * back to other threads, and each such free going unbatched would keep
 * one more free aside in the probes.
 */
static inline unsigned given_slot(const void *ptr)
{
	return (unsigned)(((uintptr_t)ptr * 0x9e3779b97f4a7c15ULL) >> 58) & (MD_BATCH_GIVEN - 1);
}

static inline void give_back(struct md_batch_thread *bt, void *ptr)
{
	bt->given[given_slot(ptr)] = (uintptr_t)ptr;
	md_real_free(ptr);
}

/* glibc's chunk header: the size word's flags, and the largest chunk of a fast bin. */
#define CHUNK_PREV_INUSE 1
#define CHUNK_IS_MMAPPED 2
#define CHUNK_NON_MAIN_ARENA 4
#define CHUNK_FLAGS 7
#define CHUNK_MAX_FAST 0x80

/*
 * give_back_held gives a block a hand-over held back to glibc, and keeps
 * it as given back when glibc put it in a fast bin (its thread cache's bin
 * full: the cache's key is not at offset 8), whose double free glibc
 * catches only at once. Blocks that go to the thread cache, where a second
 * free finds the key (suspect()), are most, and are not kept: those passed
 * between threads come back to other threads. A fast chunk stays in the
 * heap, so its words can be read after the free.
 */
static inline void give_back_held(struct md_batch_thread *bt, void *ptr)
{
	uintptr_t head = g_glibc ? ((const uintptr_t *)ptr)[-1] : CHUNK_IS_MMAPPED;

	md_real_free(ptr);
	if ((head & CHUNK_IS_MMAPPED) == 0 && (head & ~(uintptr_t)CHUNK_FLAGS) <= CHUNK_MAX_FAST &&
	    __atomic_load_n(&((const uintptr_t *)ptr)[1], __ATOMIC_RELAXED) != g_tcache_key)
		bt->given[given_slot(ptr)] = (uintptr_t)ptr;
}

static bool probed(void)
{
	return md_site_probed((const void *)(uintptr_t)mdshim_site_batch);
}

/* mdtrace's pid in an early start, which waits only while mdtrace lives. */
static pid_t early_tracer;
/*
 * Whether the early start is an injected shim's (mdtrace --all --inject),
 * whose fork children mdtrace does not follow: nobody would say ready to
 * one (a launched command's are followed, their word written).
 */
static bool early_injected;

/*
 * md_early_wait waits until mdtrace is ready. Nothing can wake the futex
 * from another process (the word is in private memory): the wait is a
 * sleep of a millisecond at a time that ends as soon as the word is set.
 * A thread that waited EARLY_WAIT_MS for nothing, or that finds mdtrace
 * gone (killed before it was ready: looked for every EARLY_LOOK_MS), ends
 * the early start for every thread, and says so.
 */
#define EARLY_LOOK_MS 20
void md_early_wait(void)
{
	struct timespec tick = { 0, 1000000 };
	int saved = errno;

	for (unsigned ms = 0; md_early_pending(); ms++) {
		bool gone = ms % EARLY_LOOK_MS == EARLY_LOOK_MS - 1 && early_tracer > 0 &&
			    syscall(SYS_kill, early_tracer, 0) != 0 && errno == ESRCH;

		if (gone || ms >= EARLY_WAIT_MS) {
			/* A process mdtrace injected the shim into is not written to. */
			if (__atomic_exchange_n(&md_early, false, __ATOMIC_ACQ_REL) &&
			    !__atomic_load_n(&mdshim_inject_routed, __ATOMIC_RELAXED)) {
				if (gone)
					md_log('E', "%s: mdtrace ended before it was ready: the calls held until now may be missing",
					       program_invocation_name);
				else
					md_log('E', "%s: mdtrace was not ready after %u ms: the calls held until now may be missing",
					       program_invocation_name, (unsigned)EARLY_WAIT_MS);
			}
			break;
		}
		syscall(SYS_futex, &mdshim_ready, FUTEX_WAIT_PRIVATE, EARLY_WAITING, &tick, NULL, 0);
	}
	errno = saved;
}

/* dlclose's wait (unwind.c). */
void md_early_hold_dlclose(void) __attribute__((visibility("hidden")));
void md_early_hold_dlclose(void)
{
	md_early_hold();
}

/*
 * early_list lists a buffer made before mdtrace is ready in
 * mdshim_early_batches, for mdtrace's reports, in place of the hand-over
 * that would register it with the probes; false when every slot is taken.
 */
static bool early_list(struct md_batch_thread *bt)
{
	for (unsigned i = 0; i < EARLY_BATCHES; i++) {
		uint64_t none = 0;

		if (__atomic_compare_exchange_n(&mdshim_early_batches[i], &none, (uint64_t)(uintptr_t)&bt->b, false,
						__ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
			bt->early_slot = i + 1;
			bt->unregistered = true;
			return true;
		}
	}
	return false;
}

/* early_unlist takes a buffer out of mdshim_early_batches: the probes know it now, or it is gone. */
static void early_unlist(struct md_batch_thread *bt)
{
	if (bt->early_slot != 0)
		__atomic_store_n(&mdshim_early_batches[bt->early_slot - 1], 0, __ATOMIC_RELEASE);
	bt->early_slot = 0;
	bt->unregistered = false;
}

/*
 * flush hands the buffer to the probes, when they are there, and then
 * frees the blocks it held. mdtrace may read the buffer meanwhile: seq is
 * odd while the buffer changes under it.
 */
static void flush(struct md_batch_thread *bt, uint64_t flags)
{
	uint64_t epoch;

	if (bt->unregistered && bt->b.used == 0 && bt->paired == 0 && flags == BATCH_RETIRE) {
		/* Nothing to hand over, and nothing for the probes to forget. */
		early_unlist(bt);
		flags = 0;
	}
	if (bt->b.used != 0 || flags != 0 || bt->paired != 0 || bt->unregistered) {
		/* A buffer made before mdtrace was ready registers with its first hand-over. */
		if (bt->unregistered && !(flags & BATCH_INHERITED))
			flags |= BATCH_REGISTER;
		/* Held, readable by mdtrace, until the probes are there to take it. */
		md_early_hold();
		__atomic_store_n(&bt->b.seq, bt->b.seq + 1, __ATOMIC_RELEASE);
		epoch = __atomic_add_fetch(&g_epoch, 1, __ATOMIC_ACQ_REL);
		if (probed())
			mdshim_site_batch(&bt->b, bt->b.used, epoch, flags | bt->paired << BATCH_PAIRED_SHIFT);
		/* Only once the probes have the allocations: see md_batch_pending. */
		if (md_batch_pending != NULL)
			pending_done(&bt->b, bt->b.used);
		__atomic_store_n(&bt->b.used, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&bt->b.seq, bt->b.seq + 1, __ATOMIC_RELEASE);
		bt->paired = 0;
		/* After the hand-over: mdtrace reads the buffer either way meanwhile, and once. */
		if (bt->unregistered)
			early_unlist(bt);
	}
	bt->nrecent = 0;
	bt->frames_at = 0;
	for (unsigned i = 0; i < bt->nheld; i++) {
		/*
		 * The word under the key goes back: a block that glibc puts in
		 * a fast bin keeps it, and a key left there would send the
		 * block's next free unbatched for nothing.
		 */
		if (bt->keyed & (1ULL << i))
			((uintptr_t *)bt->held[i])[1] = bt->word8[i];
		give_back_held(bt, bt->held[i]);
	}
	bt->nheld = 0;
	bt->keyed = 0;
	bt->held_bytes = 0;
}

static void unregister(struct md_batch_thread *bt)
{
	if (bt->prev != NULL)
		bt->prev->next = bt->next;
	else
		g_registry = bt->next;
	if (bt->next != NULL)
		bt->next->prev = bt->prev;
}

/* flush_busy is flush outside a batched call: a nested call meanwhile goes unbatched. */
static void flush_busy(struct md_batch_thread *bt, uint64_t flags)
{
	bt->busy = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	flush(bt, flags);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	bt->busy = 0;
}

void md_batch_sync(void)
{
	struct md_batch_thread *bt = t_batch;

	if (bt != NULL && bt != RETIRED && !bt->busy && (bt->b.used != 0 || bt->nheld != 0))
		flush_busy(bt, 0);
}

uint64_t md_batch_epoch(void)
{
	return __atomic_add_fetch(&g_epoch, 1, __ATOMIC_ACQ_REL);
}

/* The key's destructor: the thread ends, its last batch goes. */
static void thread_done(void *arg)
{
	struct md_batch_thread *bt = arg;

	bt->busy = 1;
	flush(bt, BATCH_RETIRE);
	pthread_mutex_lock(&g_registry_lock);
	unregister(bt);
	pthread_mutex_unlock(&g_registry_lock);
	t_batch = RETIRED;
	munmap(bt, sizeof(*bt));
}

static void fork_prepare(void)
{
	md_batch_sync();
	pthread_mutex_lock(&g_registry_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&g_registry_lock);
}

/*
 * In the child, the other threads' buffers are copies of calls the child's
 * memory reflects and its table, a copy of its parent's, does not: they
 * are handed over as the child's, and their held blocks freed.
 */
static void fork_child(void)
{
	struct md_batch_thread *bt = g_registry, *next;

	/* The sites first, if this handler runs before site.c's. */
	md_sites_after_fork();
	/*
	 * A child of a process the shim was injected into, forked before
	 * mdtrace said ready, waits for no word: its hand-overs below would
	 * have held it EARLY_WAIT_MS while mdtrace lives.
	 */
	if (early_injected)
		md_early_end();

	for (; bt != NULL; bt = next) {
		next = bt->next;
		if (bt == t_batch)
			continue;
		flush(bt, BATCH_INHERITED);
		early_unlist(bt);
		unregister(bt);
		munmap(bt, sizeof(*bt));
	}
	pthread_mutex_init(&g_registry_lock, NULL);
	/* The probes know the child's thread by its own buffer again. */
	bt = t_batch;
	if (bt != NULL && bt != RETIRED)
		flush(bt, BATCH_REGISTER | BATCH_INHERITED);
}

/*
 * At exit, the exiting thread's last calls go before the process's report,
 * with the count of its pairs (which alone does not make md_batch_sync
 * hand a batch over: a hit for a counter before every realloc would cost).
 */
__attribute__((destructor)) static void batch_exit(void)
{
	struct md_batch_thread *bt = t_batch;

	if (bt != NULL && bt != RETIRED && !bt->busy && (bt->b.used != 0 || bt->nheld != 0 || bt->paired != 0))
		flush_busy(bt, 0);
}

/*
 * learn_keys sees whether the allocator is glibc's and learns its thread
 * cache's key from a block it has just taken back, which stays in the
 * heap's memory.
 */
static void learn_keys(void)
{
	const char *tunables;
	Dl_info a, b;
	uintptr_t *w;

	if (dladdr((void *)md_real_malloc, &a) == 0 || dladdr((void *)gnu_get_libc_version, &b) == 0 ||
	    a.dli_fbase != b.dli_fbase)
		return;
	w = md_real_malloc(24);
	if (w == NULL)
		return;
	md_real_free(w);
	g_tcache_key = __atomic_load_n(&w[1], __ATOMIC_RELAXED);
	g_held_key = mix64(g_tcache_key ^ (uintptr_t)&g_held_key) | 1;
	if (g_tcache_key == 0)
		g_tcache_key = g_held_key;
	g_glibc = true;
	tunables = getenv("GLIBC_TUNABLES");
	g_heaps_known = tunables == NULL || strstr(tunables, "glibc.malloc.hugetlb=2") == NULL;
}

void md_batch_init(size_t (*usable_size)(void *))
{
	const char *s = getenv(ENV_BATCH);
	unsigned long d;
	char *end, *early;

	if (s == NULL || s[0] == '\0')
		return;
	d = strtoul(s, &end, 10);
	if (*end != '\0')
		return;
	if (!md_batch_start(d, usable_size))
		return;
	/*
	 * An early start is this program's alone: a program it executes is
	 * held at its exec until mdtrace has probed it. The variable, mdtrace's
	 * pid, gets a leading 0 in place (unsetenv could wait for the lock of a
	 * setenv that is allocating).
	 */
	early = getenv(ENV_EARLY);
	if (early != NULL && early[0] >= '1' && early[0] <= '9') {
		d = strtoul(early, &end, 10);
		early[0] = '0';
		md_early_start(*end == '\0' && d <= INT32_MAX ? (pid_t)d : 0, false);
	}
}

void md_early_start(pid_t tracer, bool injected)
{
	early_tracer = tracer;
	early_injected = injected;
	/* Now mdtrace may write the word: the loader is done with it. */
	__atomic_store_n(&mdshim_ready, EARLY_WAITING, __ATOMIC_RELEASE);
	__atomic_store_n(&md_early, true, __ATOMIC_RELEASE);
}

void md_early_end(void)
{
	__atomic_store_n(&md_early, false, __ATOMIC_RELEASE);
}

bool md_batch_start(unsigned long d, size_t (*usable_size)(void *))
{
	if (d > MAX_STACK_DEPTH || usable_size == NULL)
		return false;
	/* Started again (a shim given back, loaded anew by another mdtrace): its depth. */
	if (md_batch_on) {
		md_batch_depth = (unsigned)d;
		return true;
	}
	if (pthread_key_create(&g_key, thread_done) != 0)
		return false;
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	md_internal_begin();
	learn_keys();
	md_internal_end();
	md_batch_depth = (unsigned)d;
	g_usable_size = usable_size;
	md_batch_on = true;
	return true;
}

/*
 * thread_batch returns the thread's buffer, made on its first call, or
 * NULL when the call must go to the unbatched sites. The buffer is
 * registered with the probes at once, so that they can drain it however
 * the thread ends.
 */
static struct md_batch_thread *thread_batch(void)
{
	struct md_batch_thread *bt = t_batch;
	uintptr_t lo, hi;
	bool known;
	void *m;

	if (__builtin_expect(bt != NULL, 1))
		return bt == RETIRED ? NULL : bt;
	md_internal_begin();
	known = md_stack_bounds(&lo, &hi);
	md_internal_end();
	m = known ? mmap(NULL, sizeof(*bt), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
	if (m == MAP_FAILED)
		goto unbatched;
	bt = m;
	bt->lo = lo;
	bt->hi = hi;
	if (pthread_setspecific(g_key, bt) != 0) {
		munmap(bt, sizeof(*bt));
		goto unbatched;
	}
	pthread_mutex_lock(&g_registry_lock);
	bt->next = g_registry;
	if (g_registry != NULL)
		g_registry->prev = bt;
	g_registry = bt;
	pthread_mutex_unlock(&g_registry_lock);
	t_batch = bt;
	/* Before mdtrace is ready the buffer is listed instead, and registers at its first hand-over. */
	if (!md_early_pending() || !early_list(bt))
		flush_busy(bt, BATCH_REGISTER);
	return bt;

unbatched:
	t_batch = RETIRED;
	return NULL;
}

/*
 * walk stores the return addresses of the stack from fp, the hook's frame,
 * as the probes' own walk does at a site: the program's call of the
 * allocator first, walked by the callers' unwind tables (unwind.c) within
 * the thread's stack; why says how it ended.
 */
static inline unsigned walk(const struct md_batch_thread *bt, uintptr_t fp, uint64_t *out, enum md_unwind_stop *why)
{
	return (unsigned)md_unwind(fp, bt->lo, bt->hi, out, md_batch_depth, 0, why);
}

/*
 * begin returns the thread's buffer ready for an event of up to need
 * words, or NULL when the call goes to the unbatched sites, after the
 * buffer's events if it has any.
 */
static inline struct md_batch_thread *begin(uintptr_t fp, unsigned need)
{
	struct md_batch_thread *bt;

	if (!probed() && !md_early_pending()) {
		/*
		 * mdtrace is gone: drop the events, free the blocks. A shim
		 * mdtrace loaded into the running process gives the program's
		 * calls back to the allocator.
		 */
		md_batch_sync();
		if (mdshim_inject_routed)
			md_inject_abandon();
		return NULL;
	}
	bt = thread_batch();
	if (bt == NULL || bt->busy)
		return NULL;
	if (fp < bt->lo || fp >= bt->hi) {
		flush_busy(bt, 0);
		return NULL;
	}
	bt->busy = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	/*
	 * A buffer made before mdtrace was ready registers at the thread's
	 * first call after, so that the probes drain it at the thread's end
	 * however it ends.
	 */
	if (bt->b.used + need > BATCH_WORDS || __builtin_expect(bt->unregistered && !md_early_pending(), 0))
		flush(bt, 0);
	return bt;
}

static inline void end(struct md_batch_thread *bt, uint64_t used)
{
	__atomic_store_n(&bt->b.used, used, __ATOMIC_RELEASE);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	bt->busy = 0;
}

static inline uint64_t event_word(unsigned kind, unsigned nframes)
{
	return kind | (uint64_t)nframes << BATCH_FRAMES_SHIFT |
	       __atomic_load_n(&g_epoch, __ATOMIC_ACQUIRE) << BATCH_EPOCH_SHIFT;
}

/* walk_end is how a walk that stopped for why ended, for the probes to count (BATCH_STACK_*). */
static inline uint64_t walk_end(enum md_unwind_stop why)
{
	switch (why) {
	case MD_UNWIND_END:
		return 0;
	case MD_UNWIND_FRAME_LIMIT:
		return BATCH_STACK_CUT;
	default:
		return BATCH_STACK_STOPPED;
	}
}

/* same_end reports whether the batch's last frames are n, walked to the end walk_end says. */
static inline bool same_end(const struct md_batch_thread *bt, size_t n, uint64_t walk_end)
{
	uint64_t w0;

	if (bt->frames_at == 0)
		return false;
	w0 = bt->b.words[bt->frames_at - 1];
	return ((w0 >> BATCH_FRAMES_SHIFT) & BATCH_FRAMES_MASK) == n &&
	       (w0 & (BATCH_STACK_CUT | BATCH_STACK_STOPPED)) == walk_end;
}

/*
 * same_stack reports whether the n frames at frames, walked to the end
 * walk_end says, are those of the batch's last event with frames (an
 * allocation, or one taken back): the allocation then names them with
 * BATCH_STACK_PREV instead of repeating them, and the probes take their
 * stack id without hashing them again.
 */
static inline bool same_stack(const struct md_batch_thread *bt, const uint64_t *frames, unsigned n, uint64_t walk_end)
{
	return same_end(bt, n, walk_end) && memcmp(&bt->b.words[bt->frames_at - 1 + 3], frames, n * sizeof(*frames)) == 0;
}

bool md_batch_alloc(void *fp, void *ptr, size_t size)
{
	struct md_batch_thread *bt = begin((uintptr_t)fp, 3 + md_batch_depth);
	enum md_unwind_stop why = MD_UNWIND_END;
	uint64_t *w, off;
	unsigned n = 0;
	size_t same;

	if (bt == NULL)
		return false;
	w = &bt->b.words[bt->b.used];
	switch (__atomic_load_n(&mdshim_backtrace_state, __ATOMIC_RELAXED)) {
	case BACKTRACE_STATE_ON:
		off = 0;
		break;
	case BACKTRACE_STATE_OFF:
		off = BATCH_NO_BACKTRACE;
		break;
	default:
		/* Android's backtrace_enable_on_signal starts with them off, unless backtrace was given too. */
		off = md_cfg.backtrace_enable_on_signal && !md_cfg.backtrace_enabled ? BATCH_NO_BACKTRACE : 0;
	}
	if (!off && bt->frames_at != 0 && bt->frames_walk == md_unwind_walks &&
	    md_unwind_same((uintptr_t)fp, bt->lo, bt->hi, md_batch_depth, 0, &same, &why) &&
	    same_end(bt, same, walk_end(why))) {
		/* The walk would give the frames of the last, which the batch's last frames are. */
		off |= walk_end(why) | BATCH_STACK_PREV;
	} else {
		if (!off)
			n = walk(bt, (uintptr_t)fp, w + 3, &why);
		off |= walk_end(why);
		if (n != 0 && same_stack(bt, w + 3, n, off)) {
			off |= BATCH_STACK_PREV;
			n = 0;
		} else if (n != 0) {
			bt->frames_at = (uint16_t)(bt->b.used + 1);
		}
	}
	/* The thread's last walk has the batch's last frames. */
	if ((off & BATCH_STACK_PREV) || n != 0)
		bt->frames_walk = md_unwind_walks;
	w[0] = event_word(BATCH_ALLOC, n) | off;
	w[1] = (uintptr_t)ptr;
	w[2] = size;
	bt->recent_ptr[bt->nrecent % MD_BATCH_RECENT] = (uintptr_t)ptr;
	if (md_batch_pending != NULL)
		__atomic_add_fetch(&md_batch_pending[pending_slot(ptr)], 1, __ATOMIC_RELAXED);
	bt->recent[bt->nrecent++ % MD_BATCH_RECENT] = (uint16_t)bt->b.used;
	if (bt->given[given_slot(ptr)] == (uintptr_t)ptr)
		bt->given[given_slot(ptr)] = 0;
	end(bt, bt->b.used + 3 + n);
	return true;
}

/*
 * pair takes back the allocation of ptr and its free when the allocation
 * is one of the thread's newest events, written in the current epoch: no
 * hand-over since, so the block is the one that event allocated (another
 * thread's free of it would still be held). The words of an allocation at
 * the batch's end go; one with events after it becomes BATCH_SKIP. mdtrace
 * may be reading the batch: seq is odd while it changes. A block of an
 * older event, or one the thread no longer sees, is freed as usual.
 */
static inline bool pair(struct md_batch_thread *bt, void *ptr)
{
	uint64_t now = __atomic_load_n(&g_epoch, __ATOMIC_ACQUIRE) << BATCH_EPOCH_SHIFT >> BATCH_EPOCH_SHIFT;
	unsigned n = bt->nrecent < MD_BATCH_RECENT ? bt->nrecent : MD_BATCH_RECENT;

	for (unsigned i = 1; i <= n; i++) {
		unsigned k = (bt->nrecent - i) % MD_BATCH_RECENT;
		uint16_t *slot = &bt->recent[k];
		uint64_t *w, nr;

		if (bt->recent_ptr[k] != (uintptr_t)ptr || *slot == MD_BATCH_NO_EVENT)
			continue;
		w = &bt->b.words[*slot];
		if (w[1] != (uintptr_t)ptr)
			continue;
		if ((w[0] & BATCH_KIND_MASK) != BATCH_ALLOC || w[0] >> BATCH_EPOCH_SHIFT != now)
			return false;
		nr = (w[0] >> BATCH_FRAMES_SHIFT) & BATCH_FRAMES_MASK;
		__atomic_store_n(&bt->b.seq, bt->b.seq + 1, __ATOMIC_RELEASE);
		if (*slot + 3 + nr == bt->b.used) {
			bt->b.used = *slot;
			/* Its frames go with it: a later allocation repeats them. */
			if (bt->frames_at > bt->b.used)
				bt->frames_at = 0;
		} else {
			w[0] = (w[0] & ~(uint64_t)BATCH_KIND_MASK) | BATCH_SKIP;
		}
		__atomic_store_n(&bt->b.seq, bt->b.seq + 1, __ATOMIC_RELEASE);
		*slot = MD_BATCH_NO_EVENT;
		bt->paired++;
		/* No batch holds the allocation any more: the block goes back to the allocator. */
		if (md_batch_pending != NULL)
			__atomic_sub_fetch(&md_batch_pending[pending_slot(ptr)], 1, __ATOMIC_RELEASE);
		return true;
	}
	return false;
}

/*
 * suspect reports whether glibc's free could refuse ptr, a block of glibc's
 * (g_glibc): it makes glibc's own first checks, in its order, on the words
 * that glibc's free reads anyway: a misaligned pointer, a chunk size glibc
 * would call invalid, a block in the thread cache or held by a batch (the
 * key at offset 8), a block of the main heap whose next chunk says it is
 * free already (or that ends past the heap: the main heap's end, or a
 * thread arena's heap's). A fast-bin block freed twice is caught by glibc
 * only when it is the bin's first: not checked here, but a block the
 * thread gave back to glibc itself, taken back with its allocation or put
 * in a fast bin, is (given_slot()). A block that only looks suspect (the program's data at
 * offset 8 equal to a key) merely goes unbatched.
 */
static inline bool suspect(void *ptr)
{
	const uintptr_t *w = ptr;
	uintptr_t chunk = (uintptr_t)ptr - 16, head, size, next;

	if (((uintptr_t)ptr & 15) != 0)
		return true;
	head = w[-1];
	size = head & ~(uintptr_t)CHUNK_FLAGS;
	if (head & CHUNK_IS_MMAPPED)
		return (((chunk - w[-2]) | (w[-2] + size)) & 4095) != 0 || w[1] == g_held_key;
	if (chunk > -size || size < 32 || (size & 15) != 0)
		return true;
	if (w[1] == g_tcache_key || w[1] == g_held_key)
		return true;
	if (size <= CHUNK_MAX_FAST)
		return false;
	next = chunk + size;
	if (head & CHUNK_NON_MAIN_ARENA) {
		/*
		 * A thread arena's heap: aligned to its largest size, with its
		 * current size in its header (heap_info), as glibc finds it.
		 */
		uintptr_t heap = chunk & ~(uintptr_t)(HEAP_MAX_SIZE - 1);

		if (!g_heaps_known)
			return false;
		if (next + 16 > heap + ((const uintptr_t *)heap)[2] || next + 16 < chunk)
			return true;
	} else if (next + 16 > (uintptr_t)__curbrk || next + 16 < chunk) {
		return true;
	}
	return (((const uintptr_t *)next)[1] & CHUNK_PREV_INUSE) == 0;
}

bool md_batch_free(void *fp, void *ptr)
{
	struct md_batch_thread *bt;
	uint64_t *w;
	size_t usable;

	bt = t_batch;
	if (g_glibc && __builtin_expect(suspect(ptr) || (bt != NULL && bt != RETIRED &&
							   bt->given[given_slot(ptr)] == (uintptr_t)ptr), 0)) {
		md_batch_sync();
		return false;
	}
	bt = begin((uintptr_t)fp, 2);
	if (bt == NULL)
		return false;
	if (pair(bt, ptr)) {
		end(bt, bt->b.used);
		give_back(bt, ptr);
		return true;
	}
	if (bt->nheld == MD_BATCH_HELD)
		flush(bt, 0);
	w = &bt->b.words[bt->b.used];
	w[0] = event_word(BATCH_FREE, 0);
	w[1] = (uintptr_t)ptr;
	usable = g_usable_size(ptr);
	/* A second free of the block finds the key: glibc's own free writes there. */
	if (g_glibc && usable >= 16) {
		bt->keyed |= 1ULL << bt->nheld;
		bt->word8[bt->nheld] = ((uintptr_t *)ptr)[1];
		((uintptr_t *)ptr)[1] = g_held_key;
	}
	bt->held[bt->nheld++] = ptr;
	bt->held_bytes += usable;
	bt->b.used += 2;
	/* A program that frees large blocks gets its memory back at once. */
	if (bt->held_bytes > MD_BATCH_HELD_BYTES)
		flush(bt, 0);
	end(bt, bt->b.used);
	return true;
}

