// chain leaks one block of 4321 bytes from the bottom of a call chain
// twelve functions deep (main, then chain_1 to chain_12), and mallocs and
// frees COUNT more blocks there: its backtraces reach main only through
// every function of the chain. It prints the loop's nanoseconds a pair
// ("pairs COUNT NS"), as testdata/pairs does, for make bench. The Makefile builds it as distributions
// build code, -O2 without frame pointers, with gcc and with clang, and at
// -O0 with frame pointers.
//
//   chain COUNT
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *volatile sink;

#define LINK(n, next)                                                        \
	__attribute__((noinline)) void *chain_##n(int count)                \
	{                                                                    \
		void *p = next(count);                                       \
		/* Not a tail call: the frame stays on the stack. */         \
		__asm__ volatile("" : : "r"(p) : "memory");                  \
		return p;                                                    \
	}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

__attribute__((noinline)) void *chain_12(int count)
{
	double t0 = now_ns();
	for (int i = 0; i < count; i++) {
		/* Through a volatile: -O2 removes a malloc freed at once. */
		sink = malloc(64);
		free(sink);
	}
	if (count > 0)
		printf("pairs %d %.1f\n", count, (now_ns() - t0) / count);
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
	void *p = chain_1(argc > 1 ? atoi(argv[1]) : 0);
	__asm__ volatile("" : : "r"(p) : "memory");
	return 0;
}
