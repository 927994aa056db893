// mdreplay: replays the allocator calls of a record_allocs file, as
// Android's memory_replay does, for "mdtrace replay". mdtrace parses the
// file and writes the calls on standard input in the binary form of
// replay/mdreplay.h; mdreplay makes them with the allocator it runs with
// (LD_PRELOAD chooses another) and writes its measurements on the file
// descriptor named by its only argument.
//
// Each recorded thread gets a thread of its own. The main thread is the
// dispatcher: it hands each call, in file order, to the queue of its
// thread. A call on a pointer another thread made (a free, a realloc)
// first waits until that thread has made the call that returned it, so
// that the calls of one pointer run in the order of the file while the
// threads otherwise run side by side.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mdreplay.h"

// QUEUE_LEN is the number of calls a thread's queue holds: the dispatcher
// waits for room when the thread is that far behind.
#define QUEUE_LEN 4096
// The stack of a replay thread: it needs little, and a trace can have
// thousands of threads.
#define STACK_SIZE (256 << 10)

struct thread {
	pthread_t handle;
	int started;
	pthread_mutex_t mu;
	// changed is broadcast when a call is queued or made.
	pthread_cond_t changed;
	struct md_op *queue;
	uint64_t head, tail; // calls taken, calls queued
	uint64_t done;       // calls made, in the order of the queue
	// Measurements of this thread, read after it is joined.
	uint64_t count[MD_OP_KINDS];
	uint64_t ns;
	uint64_t failed;
};

static struct thread *threads;
static uint32_t nthreads;
// ptrs maps a recorded pointer's id to the pointer of the replay. Each id
// is used by one allocation only (mdtrace never reuses one), and the
// calls of an id are ordered by the waits, so the table needs no lock.
static void **ptrs;
static uint64_t nids;
static long pagesize;

static void die(const char *what)
{
	fprintf(stderr, "mdreplay: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// touch writes one byte of each page of a new block to make it resident:
// the replay's RSS then reflects the pages the allocator hands out, as in
// a program that uses its blocks, not only its address space. calloc's
// blocks are touched too, as an allocator may hand out fresh zero pages
// without writing them.
static void touch(void *p, uint64_t size)
{
	volatile char *c = p;
	if (p == NULL)
		return;
	for (uint64_t i = 0; i < size; i += (uint64_t)pagesize)
		c[i] = 1;
}

// pow2 rounds an alignment up to a power of two, which memalign needs
// from some allocators; glibc's rounds it the same way.
static uint64_t pow2(uint64_t a)
{
	uint64_t p = 1;
	while (p < a && p < (UINT64_C(1) << 62))
		p <<= 1;
	return p;
}

// wait_for waits until thread t has made its first seq calls.
static void wait_for(uint32_t t, uint64_t seq)
{
	struct thread *d = &threads[t];
	pthread_mutex_lock(&d->mu);
	while (d->done < seq)
		pthread_cond_wait(&d->changed, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

// run makes one call; it returns 0 after the call that ends the thread.
static int run(struct thread *self, const struct md_op *op)
{
	if (op->dep_thread != MD_NO_THREAD)
		wait_for(op->dep_thread, op->dep_seq);
	void *p = NULL;
	uint64_t start = now_ns(), end;
	uint64_t size = op->size;
	switch (op->kind) {
	case MD_OP_MALLOC:
		p = malloc(size);
		end = now_ns();
		break;
	case MD_OP_CALLOC:
		p = calloc(op->arg, size);
		end = now_ns();
		// calloc(n, s) asks for n * s bytes; the product cannot
		// overflow, mdtrace checks it.
		size = op->arg * op->size;
		break;
	case MD_OP_MEMALIGN:
		p = memalign(pow2(op->arg), size);
		end = now_ns();
		break;
	case MD_OP_REALLOC: {
		void *old = op->old_id == MD_NO_ID ? NULL : ptrs[op->old_id];
		p = realloc(old, size);
		end = now_ns();
		// The block moved to the new pointer's id, unless realloc
		// failed and left it where it was.
		if (op->old_id != MD_NO_ID && (p != NULL || size == 0))
			ptrs[op->old_id] = NULL;
		if (size == 0) {
			// realloc(p, 0) freed the block: what it returns, if
			// anything, is not the trace's to keep.
			free(p);
			p = NULL;
		}
		break;
	}
	case MD_OP_FREE:
		free(ptrs[op->id]);
		end = now_ns();
		ptrs[op->id] = NULL;
		break;
	case MD_OP_THREAD_DONE:
		end = start;
		break;
	default:
		fprintf(stderr, "mdreplay: unknown call kind %u\n", op->kind);
		exit(1);
	}
	if (op->kind != MD_OP_FREE && op->kind != MD_OP_THREAD_DONE) {
		if (p == NULL && size != 0)
			self->failed++;
		touch(p, size);
		if (op->id != MD_NO_ID)
			ptrs[op->id] = p;
	}
	self->count[op->kind]++;
	self->ns += end - start;
	return op->kind != MD_OP_THREAD_DONE;
}

static void *worker(void *arg)
{
	struct thread *self = arg;
	for (;;) {
		pthread_mutex_lock(&self->mu);
		while (self->head == self->tail)
			pthread_cond_wait(&self->changed, &self->mu);
		struct md_op op = self->queue[self->head % QUEUE_LEN];
		self->head++;
		pthread_mutex_unlock(&self->mu);

		int more = op.kind == MD_OP_STOP ? 0 : run(self, &op);

		pthread_mutex_lock(&self->mu);
		self->done++;
		pthread_cond_broadcast(&self->changed);
		pthread_mutex_unlock(&self->mu);
		if (!more)
			return NULL;
	}
}

static void start(struct thread *t)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, STACK_SIZE);
	t->queue = malloc(sizeof(struct md_op) * QUEUE_LEN);
	if (t->queue == NULL)
		die("allocating a queue");
	int err = pthread_create(&t->handle, &attr, worker, t);
	pthread_attr_destroy(&attr);
	if (err != 0) {
		errno = err;
		die("creating a thread");
	}
	t->started = 1;
}

static void dispatch(struct thread *t, const struct md_op *op)
{
	pthread_mutex_lock(&t->mu);
	while (t->tail - t->head == QUEUE_LEN)
		pthread_cond_wait(&t->changed, &t->mu);
	t->queue[t->tail % QUEUE_LEN] = *op;
	t->tail++;
	pthread_cond_broadcast(&t->changed);
	pthread_mutex_unlock(&t->mu);
}

// The calls are read a buffer at a time: a read a call would cost the
// dispatcher a system call for each, and hold back the threads it feeds.
static char inbuf[1 << 16];
static size_t inpos, inlen;

// read_full reads exactly n bytes; it returns 0 at the end of the input
// before any byte, and exits on a short read.
static int read_full(void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		if (inpos == inlen) {
			ssize_t r = read(0, inbuf, sizeof(inbuf));
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				die("reading the calls");
			if (r == 0) {
				if (got == 0)
					return 0;
				fprintf(stderr, "mdreplay: the calls end in the middle of one\n");
				exit(1);
			}
			inpos = 0;
			inlen = (size_t)r;
		}
		size_t take = n - got < inlen - inpos ? n - got : inlen - inpos;
		memcpy((char *)buf + got, inbuf + inpos, take);
		inpos += take;
		got += take;
	}
	return 1;
}

// max_rss_kb returns the peak RSS of the process, VmHWM. getrusage's
// ru_maxrss would not do: exec keeps the peak of the process before it,
// mdtrace's own.
static uint64_t max_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long kb = 0;
	if (f == NULL)
		die("opening /proc/self/status");
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
			break;
	fclose(f);
	if (kb == 0) {
		fprintf(stderr, "mdreplay: no VmHWM in /proc/self/status\n");
		exit(1);
	}
	return kb;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mdreplay RESULT_FD < CALLS (run by mdtrace replay)\n");
		return 2;
	}
	FILE *result = fdopen(atoi(argv[1]), "w");
	if (result == NULL)
		die("opening the result descriptor");
	pagesize = sysconf(_SC_PAGESIZE);

	struct md_header h;
	if (!read_full(&h, sizeof(h)) || memcmp(h.magic, MD_MAGIC, sizeof(h.magic)) != 0) {
		fprintf(stderr, "mdreplay: the input is not mdtrace replay's\n");
		return 1;
	}
	nthreads = h.threads;
	nids = h.ids;
	threads = calloc(nthreads ? nthreads : 1, sizeof(*threads));
	ptrs = calloc(nids ? nids : 1, sizeof(*ptrs));
	if (threads == NULL || ptrs == NULL)
		die("allocating the tables");
	for (uint32_t i = 0; i < nthreads; i++) {
		pthread_mutex_init(&threads[i].mu, NULL);
		pthread_cond_init(&threads[i].changed, NULL);
	}
	uint64_t rss_before = max_rss_kb();

	uint64_t wall = now_ns();
	struct md_op op;
	uint64_t nops = 0;
	while (read_full(&op, sizeof(op))) {
		if (op.thread >= nthreads || op.kind >= MD_OP_KINDS || op.kind == 0 ||
		    (op.id != MD_NO_ID && op.id >= nids) || (op.old_id != MD_NO_ID && op.old_id >= nids) ||
		    (op.dep_thread != MD_NO_THREAD && op.dep_thread >= nthreads)) {
			fprintf(stderr, "mdreplay: call %llu is out of range\n", (unsigned long long)nops);
			return 1;
		}
		struct thread *t = &threads[op.thread];
		if (!t->started)
			start(t);
		dispatch(t, &op);
		nops++;
	}
	// The threads without a thread_done stop at the end of the trace.
	struct md_op stop = {.kind = MD_OP_STOP, .dep_thread = MD_NO_THREAD, .id = MD_NO_ID, .old_id = MD_NO_ID};
	for (uint32_t i = 0; i < nthreads; i++) {
		struct thread *t = &threads[i];
		if (!t->started)
			continue;
		pthread_mutex_lock(&t->mu);
		int ended = t->tail > 0 && t->queue[(t->tail - 1) % QUEUE_LEN].kind == MD_OP_THREAD_DONE;
		pthread_mutex_unlock(&t->mu);
		if (!ended)
			dispatch(t, &stop);
	}
	for (uint32_t i = 0; i < nthreads; i++)
		if (threads[i].started)
			pthread_join(threads[i].handle, NULL);
	wall = now_ns() - wall;
	uint64_t rss = max_rss_kb();

	// What the trace left allocated is freed, untimed, as memory_replay
	// does at its end.
	uint64_t left = 0;
	for (uint64_t i = 0; i < nids; i++) {
		if (ptrs[i] != NULL) {
			free(ptrs[i]);
			left++;
		}
	}

	uint64_t count[MD_OP_KINDS] = {0}, ns = 0, failed = 0;
	uint32_t started = 0;
	for (uint32_t i = 0; i < nthreads; i++) {
		struct thread *t = &threads[i];
		started += t->started;
		for (int k = 0; k < MD_OP_KINDS; k++)
			count[k] += t->count[k];
		ns += t->ns;
		failed += t->failed;
	}
	// The file that defines the malloc the replay called: mdtrace checks
	// that it is the allocator asked for, which the loader only warns
	// about when it cannot preload it.
	Dl_info info;
	void *(*m)(size_t) = malloc;
	if (dladdr((void *)m, &info) == 0 || info.dli_fname == NULL || strchr(info.dli_fname, '\n') != NULL) {
		fprintf(stderr, "mdreplay: cannot find the file that defines malloc\n");
		return 1;
	}
	fprintf(result, "allocator %s\n", info.dli_fname);
	fprintf(result, "threads %u\n", started);
	for (int k = 1; k < MD_OP_KINDS; k++)
		fprintf(result, "count %d %llu\n", k, (unsigned long long)count[k]);
	fprintf(result, "call_ns %llu\nwall_ns %llu\nfailed %llu\nleft %llu\nrss_before_kb %llu\nmax_rss_kb %llu\n",
		(unsigned long long)ns, (unsigned long long)wall, (unsigned long long)failed,
		(unsigned long long)left, (unsigned long long)rss_before, (unsigned long long)rss);
	if (fclose(result) != 0)
		die("writing the result");
	return 0;
}
