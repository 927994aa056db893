// otheralloc leaks exactly three blocks from known functions, whatever
// allocator serves it: built -O2 without frame pointers and linked with
// jemalloc (otheralloc_jemalloc), tcmalloc (otheralloc_tcmalloc) or glibc
// (otheralloc). It says "ready" and waits for a line (a tracer attaches
// meanwhile), frees the blocks it made before, leaks its three, churns,
// says "done", and waits for another line or the end of its input.
//
//   otheralloc [EXIT_CODE | segv]
//
// Then it exits with EXIT_CODE (0 by default), or dies of SIGSEGV.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile before[5];
static void *volatile leaks[3];
static int *volatile nowhere;

NOINLINE void other_leak_malloc(void) { leaks[0] = malloc(1001); }
NOINLINE void other_leak_calloc(void) { leaks[1] = calloc(2, 1001); }
NOINLINE void other_leak_realloc(void) { leaks[2] = realloc(leaks[2], 3003); }

static void wait_line(void)
{
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(int argc, char **argv)
{
	for (int i = 0; i < 5; i++)
		before[i] = malloc(4001 + i);
	write(1, "ready\n", 6);
	wait_line();
	for (int i = 0; i < 5; i++)
		free(before[i]);
	other_leak_malloc();
	other_leak_calloc();
	other_leak_realloc();
	for (int i = 0; i < 1000; i++) {
		void *volatile p = malloc(64 + i % 7);
		free(p);
	}
	write(1, "done\n", 5);
	wait_line();
	if (argc > 1 && strcmp(argv[1], "segv") == 0)
		*nowhere = 1;
	return argc > 1 ? atoi(argv[1]) : 0;
}
