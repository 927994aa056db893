// leaky leaks exactly known blocks, each from a known function, through
// every allocation function of glibc and from a constructor, and frees
// everything else.
//
//   leaky [EXIT_CODE | abort | hold]
//
// With a number it exits with that code; with "abort" it dies of SIGABRT;
// with "hold" it waits for a line on standard input before it exits.
// It writes with write(2) only, so that stdio allocates nothing.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile sink[16];
// A null the compiler cannot see: it would turn realloc(NULL, n) into malloc(n).
static void *volatile null;
// Sizes the compiler cannot see, so that it does not warn of them.
static volatile size_t huge = SIZE_MAX / 2;
static int nsink;

static void keep(void *p)
{
	sink[nsink++] = p;
}

// Runs before main: launch mode must see it.
__attribute__((constructor)) NOINLINE void leak_in_constructor(void) { keep(malloc(1013)); }

NOINLINE void leak_malloc(void) { keep(malloc(1001)); }
NOINLINE void leak_calloc(void) { keep(calloc(3, 334)); }
NOINLINE void leak_realloc_new(void) { keep(realloc(null, 1003)); }

NOINLINE void leak_realloc_grow(void)
{
	char *p = malloc(10);
	keep(realloc(p, 1004));
}

NOINLINE void leak_reallocarray(void) { keep(reallocarray(null, 5, 201)); }
NOINLINE void leak_memalign(void) { keep(memalign(64, 1006)); }
NOINLINE void leak_aligned_alloc(void) { keep(aligned_alloc(64, 1024)); }

NOINLINE void leak_posix_memalign(void)
{
	void *p = NULL;
	if (posix_memalign(&p, 32, 1008) == 0)
		keep(p);
}

NOINLINE void leak_valloc(void) { keep(valloc(1009)); }
NOINLINE void leak_pvalloc(void) { keep(pvalloc(1010)); }

// A reallocarray that overflows fails and leaves the block alone.
NOINLINE void leak_failed_reallocarray(void)
{
	void *p = malloc(1011);
	if (reallocarray(p, huge, 4) == NULL)
		keep(p);
}

// A realloc too large to succeed leaves the block alone.
NOINLINE void leak_failed_realloc(void)
{
	void *p = malloc(1012);
	if (realloc(p, huge * 2 - 4096) == NULL)
		keep(p);
}

// realloc(p, 0) frees p; free(NULL) is nothing.
NOINLINE void no_leak_realloc_zero(void)
{
	void *p = malloc(2000);
	realloc(p, 0);
	free(NULL);
}

// churn allocates and frees many blocks of 32 to 96 bytes.
NOINLINE void churn(int n)
{
	void *ring[64] = {0};
	for (int i = 0; i < n; i++) {
		int slot = i % 64;
		free(ring[slot]);
		ring[slot] = malloc(32 + (i * 7) % 65);
	}
	for (int i = 0; i < 64; i++)
		free(ring[i]);
	void *c = calloc(10, 10);
	c = realloc(c, 50);
	c = realloc(c, 5000);
	free(c);
	void *m = memalign(128, 100);
	free(m);
}

static void say(const char *s)
{
	write(1, s, strlen(s));
}

int main(int argc, char **argv)
{
	leak_malloc();
	leak_calloc();
	leak_realloc_new();
	leak_realloc_grow();
	leak_reallocarray();
	leak_memalign();
	leak_aligned_alloc();
	leak_posix_memalign();
	leak_valloc();
	leak_pvalloc();
	leak_failed_reallocarray();
	leak_failed_realloc();
	no_leak_realloc_zero();
	churn(10000);
	say("leaky: done\n");
	if (argc > 1 && strcmp(argv[1], "abort") == 0)
		abort();
	if (argc > 1 && strcmp(argv[1], "hold") == 0) {
		char c;
		while (read(0, &c, 1) == 1 && c != '\n')
			;
		return 0;
	}
	return argc > 1 ? atoi(argv[1]) : 0;
}
