// exact makes calls whose outcome under mdtrace must be the native one,
// built as distributions build code (-O2, no frame pointers).
//
//   exact wild        frees two pointers no allocator gave out
//                     (0xdead0000, unmapped, and 0x87654321), then
//                     prints "wild done" and exits 0
//   exact double      frees a 40-byte block twice between lines on
//                     stderr: glibc aborts at the second free, before
//                     the line after it on stdout
//   exact double-big  the same with a 2000-byte block, past the thread
//                     cache's sizes
//   exact double-mmap the same with a block of 200000 bytes, which glibc
//                     maps for it: the second free faults on its header
//   exact double-fast the same with a 40-byte block when the thread
//                     cache's bin of its size is full: the block goes to
//                     a fast bin, whose first block glibc checks
//   exact double-fast-old the same, the block's allocation and its first
//                     free each handed over by a realloc after them
//   exact double-thread the double-big case in a thread, whose blocks come
//                     from an arena of their own
//   exact double-thread-old the same, the block's allocation and its first
//                     free each handed over by a realloc after them
//   exact invalid     frees a pointer 16 bytes inside a block
//   exact abort       leaks 300 blocks in main and 200 in each of two
//                     threads (abort_leaks), which then wait, and aborts
//   exact _exit       the same, ending with _exit(3)
//   exact direct      leaks 10 blocks allocated past malloc's name, each
//                     with a frame of its own: 4 of 1111 bytes through
//                     dlsym(libc, "malloc") (via_dlsym), 3 of 2222 through
//                     dlvsym(libc, "calloc", "GLIBC_2.2.5") (via_dlvsym) and
//                     3 of 3333 through __libc_malloc (via_libc_malloc);
//                     frees one more of each way through dlsym's free
//   exact longjmp     frees 0xdead0000, whose memory is not mapped, and
//                     leaves the fault's handler by siglongjmp; then
//                     leaks 4444 bytes 8 calls deeper (deep_leak), writes
//                     a byte past a block of 64 and frees it, and frees
//                     a block of 100 correctly
//   exact present     frees a block of 100 bytes, all written, and one of 64
//                     pages (mapped for it) of which 3 were written, and
//                     reallocates a written block of 200 bytes to 5000
//   exact zero        leaks malloc(0), calloc(0, 8) and memalign(64, 0)
//                     (zero_leaks)
//   exact threads     starts 4 threads, one after another, that each
//                     free the 48-byte block they are given and leak one
//                     of 33 bytes (thread_leak), then joins them
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static char *volatile p;

static void say(const char *s)
{
	fputs(s, stderr);
}

NOINLINE void first_free(void) { free(p); }
NOINLINE void second_free(void) { free(p); }

/*
 * sync_realloc is a realloc(NULL, 1): under mdtrace's shim, a realloc hands
 * the thread's batch over first. Through a volatile, or the compiler makes
 * it a malloc.
 */
static void *sync_realloc(void)
{
	void *volatile none = NULL;

	return realloc(none, 1);
}

/* The bad frees of exact double, double-big, double-mmap, double-fast(-old) and invalid. */
static void bad_free(const char *how)
{
	size_t size = strncmp(how, "double-big", 10) == 0 ? 2000 : strcmp(how, "double-mmap") == 0 ? 200000 : 40;
	void *keep[8], *cache[7];

	for (int i = 0; i < 8; i++)
		keep[i] = malloc(size);
	bool fast = strncmp(how, "double-fast", 11) == 0, old = strcmp(how, "double-fast-old") == 0 || strcmp(how, "double-big-old") == 0;

	for (int i = 0; i < 7 && fast; i++)
		cache[i] = malloc(size);
	p = malloc(size);
	/* A block after it, so that it does not join the heap's top. */
	keep[0] = malloc(size);
	/* Seven blocks fill the thread cache's bin of the size. */
	if (fast)
		for (int i = 0; i < 7; i++)
			free(cache[i]);
	/* A realloc, which hands the shim's batch over: the block is an old one. */
	if (old)
		free(sync_realloc());
	say("before first free\n");
	if (strcmp(how, "invalid") == 0)
		p += 16;
	first_free();
	if (old)
		free(sync_realloc());
	say("before second free\n");
	second_free();
	/*
	 * Never natively. On stderr, unbuffered, so that an abort that comes
	 * later shows it; and on stdout, whose buffer glibc allocates.
	 */
	say("after second free\n");
	printf("after second free\n");
	for (int i = 0; i < 8; i++)
		free(keep[i]);
}

static void *bad_free_thread(void *arg)
{
	bad_free(arg);
	return NULL;
}

NOINLINE void wild_free(uintptr_t addr)
{
	free((void *)addr);
	__asm__ volatile("" ::: "memory");
}

void *volatile keep[3];

NOINLINE void zero_leaks(void)
{
	keep[0] = malloc(0);
	keep[1] = calloc(0, 8);
	keep[2] = memalign(64, 0);
}

extern void *__libc_malloc(size_t size);

void *volatile direct[10];

NOINLINE void via_dlsym(void *(*m)(size_t), int i)
{
	direct[i] = m(1111);
	__asm__ volatile("" ::: "memory");
}

NOINLINE void via_dlvsym(void *(*c)(size_t, size_t), int i)
{
	direct[i] = c(1, 2222);
	__asm__ volatile("" ::: "memory");
}

NOINLINE void via_libc_malloc(int i)
{
	direct[i] = __libc_malloc(3333);
	__asm__ volatile("" ::: "memory");
}

static int direct_calls(void)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *(*m)(size_t), *(*c)(size_t, size_t);
	void (*f)(void *);

	if (libc == NULL)
		return 1;
	m = (void *(*)(size_t))dlsym(libc, "malloc");
	c = (void *(*)(size_t, size_t))dlvsym(libc, "calloc", "GLIBC_2.2.5");
	f = (void (*)(void *))dlsym(libc, "free");
	if (m == NULL || c == NULL || f == NULL)
		return 1;
	for (int i = 0; i < 4; i++)
		via_dlsym(m, i);
	for (int i = 4; i < 7; i++)
		via_dlvsym(c, i);
	for (int i = 7; i < 10; i++)
		via_libc_malloc(i);
	f(m(1111));
	f(c(1, 2222));
	f(__libc_malloc(3333));
	return 0;
}

static sigjmp_buf jump_back;

static void on_fault(int sig)
{
	(void)sig;
	siglongjmp(jump_back, 1);
}

void *volatile deep_block;

NOINLINE void deep_leak(volatile int depth)
{
	if (depth > 0)
		deep_leak(depth - 1);
	else
		deep_block = malloc(4444);
	__asm__ volatile("" ::: "memory");
}

static int fault_and_jump(void)
{
	struct sigaction sa = { .sa_handler = on_fault };
	volatile char *q;
	volatile int past = 64;

	sigaction(SIGSEGV, &sa, NULL);
	if (sigsetjmp(jump_back, 1) == 0) {
		wild_free(0xdead0000);
		say("no fault\n");
		return 1;
	}
	say("after the fault\n");
	deep_leak(8);
	q = malloc(64);
	q[past] = 0x11;
	free((void *)q);
	free(malloc(100));
	return 0;
}

static pthread_barrier_t ready;

NOINLINE void abort_leaks(int n)
{
	for (int i = 0; i < n; i++) {
		void *volatile p = malloc(100 + i % 7);
		(void)p;
	}
}

static void *leak_and_wait(void *arg)
{
	(void)arg;
	abort_leaks(200);
	pthread_barrier_wait(&ready);
	pause();
	return NULL;
}

NOINLINE void *thread_leak(void *arg)
{
	void *r;

	free(arg);
	r = malloc(33);
	/* Not a tail call: the block's backtrace starts here. */
	__asm__ volatile("" : : "r"(r) : "memory");
	return r;
}

static void run_threads(void *(*fn)(void *))
{
	pthread_t t[4];

	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, fn, malloc(48));
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "abort") == 0 || strcmp(argv[1], "_exit") == 0) {
		pthread_t t;

		pthread_barrier_init(&ready, NULL, 3);
		for (int i = 0; i < 2; i++)
			pthread_create(&t, NULL, leak_and_wait, NULL);
		abort_leaks(300);
		pthread_barrier_wait(&ready);
		if (argv[1][0] == '_')
			_exit(3);
		abort();
	}
	if (strcmp(argv[1], "present") == 0) {
		size_t page = (size_t)getpagesize();
		char *small = malloc(100), *big = memalign(page, 64 * page), *grow = malloc(200);

		/* The barriers keep the writes, which a free would let the compiler drop. */
		memset(small, 1, malloc_usable_size(small));
		__asm__ volatile("" : : "r"(small) : "memory");
		free(small);
		for (int i = 0; i < 3; i++)
			big[i * 2 * page] = 1;
		__asm__ volatile("" : : "r"(big) : "memory");
		free(big);
		memset(grow, 2, malloc_usable_size(grow));
		__asm__ volatile("" : : "r"(grow) : "memory");
		free(realloc(grow, 5000));
		return 0;
	}
	if (strcmp(argv[1], "longjmp") == 0)
		return fault_and_jump();
	if (strcmp(argv[1], "direct") == 0)
		return direct_calls();
	if (strcmp(argv[1], "zero") == 0) {
		zero_leaks();
		return 0;
	}
	if (strcmp(argv[1], "threads") == 0) {
		run_threads(thread_leak);
		return 0;
	}
	if (strcmp(argv[1], "wild") == 0) {
		wild_free(0xdead0000);
		wild_free(0x87654321);
		puts("wild done");
		return 0;
	}
	if (strcmp(argv[1], "double") == 0 || strcmp(argv[1], "double-big") == 0 ||
	    strcmp(argv[1], "double-mmap") == 0 || strcmp(argv[1], "invalid") == 0 ||
	    strncmp(argv[1], "double-fast", 11) == 0) {
		bad_free(argv[1]);
		return 0;
	}
	if (strcmp(argv[1], "double-thread") == 0 || strcmp(argv[1], "double-thread-old") == 0) {
		pthread_t t;

		pthread_create(&t, NULL, bad_free_thread, strcmp(argv[1], "double-thread") == 0 ? "double-big" : "double-big-old");
		pthread_join(t, NULL);
		return 0;
	}
	return 2;
}
