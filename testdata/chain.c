// chain leaks one block of 4321 bytes from the bottom of a call chain
// twelve functions deep (main, then chain_1 to chain_12), and mallocs and
// frees COUNT more blocks there: its backtraces reach main only through
// every function of the chain. It prints the loop's nanoseconds a pair
// ("pairs COUNT NS CPU"), as testdata/pairs does, for make bench, and the
// CPU nanoseconds a pair the process spent in the loop (the probes' time
// included: they run in its context). The Makefile builds it as distributions
// build code, -O2 without frame pointers, with gcc and with clang, and at
// -O0 with frame pointers.
//
// With LAG, each block is freed LAG pairs after its malloc, not at once:
// the shim's batches then hand each block's malloc and free to mdtrace's
// probes, where a block freed at once takes both calls back in its
// thread's batch (LAG 0). The bench measures both.
//
// With CHAIN_WAIT set in its environment, it says "ready" and waits for a
// line on standard input before its loop, for a tracer to attach meanwhile
// (the bench's -p rows).
//
//   chain COUNT [LAG]   (LAG up to 1024)
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;
static int lag;
static void *ring[1024];

#define LINK(n, next)                                                        \
	__attribute__((noinline)) void *chain_##n(int count)                \
	{                                                                    \
		void *p = next(count);                                       \
		/* Not a tail call: the frame stays on the stack. */         \
		__asm__ volatile("" : : "r"(p) : "memory");                  \
		return p;                                                    \
	}

static double clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

__attribute__((noinline)) void *chain_12(int count)
{
	double t0 = now_ns(), c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	if (lag == 0) {
		for (int i = 0; i < count; i++) {
			/* Through a volatile: -O2 removes a malloc freed at once. */
			sink = malloc(64);
			free(sink);
		}
	} else {
		for (int i = 0; i < count; i++) {
			void **slot = &ring[i % lag];
			free(*slot);
			*slot = malloc(64);
		}
	}
	if (count > 0)
		printf("pairs %d %.1f %.1f\n", count, (now_ns() - t0) / count,
		       (clock_ns(CLOCK_PROCESS_CPUTIME_ID) - c0) / count);
	for (int i = 0; i < lag; i++)
		free(ring[i]);
	sink = malloc(4321);
	__asm__ volatile("" : : : "memory");
	return sink;
}

LINK(11, chain_12)
LINK(10, chain_11)
LINK(9, chain_10)
LINK(8, chain_9)
LINK(7, chain_8)
LINK(6, chain_7)
LINK(5, chain_6)
LINK(4, chain_5)
LINK(3, chain_4)
LINK(2, chain_3)
LINK(1, chain_2)

int main(int argc, char **argv)
{
	if (argc > 2)
		lag = atoi(argv[2]);
	if (lag < 0 || lag > 1024) {
		fprintf(stderr, "chain: LAG must be 0 to 1024\n");
		return 2;
	}
	if (getenv("CHAIN_WAIT") != NULL) {
		char c;

		/* Without stdio, which would allocate its buffers before the attach. */
		write(1, "ready\n", 6);
		while (read(0, &c, 1) == 1 && c != '\n')
			;
	}
	void *p = chain_1(argc > 1 ? atoi(argv[1]) : 0);
	__asm__ volatile("" : : "r"(p) : "memory");
	return 0;
}
