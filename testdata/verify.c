// verify hands bad pointers to the allocator, for verify_pointers.
//
//   verify double     frees a block twice (glibc then aborts)
//   verify interior   frees a pointer inside a block (glibc then aborts)
//   verify usable     asks malloc_usable_size of a freed block, then exits 0
//   verify write      writes into a freed block, and leaks 1234 bytes from
//                     leak_after_free (for free_track), then exits 0
//   verify threads    runs four threads that each malloc and free 50 blocks
//                     and end: glibc then frees what their caches hold
//                     through free; a correct program, it exits 0
//   verify thread-double
//                     a thread frees a block (thread_first_free), and the
//                     destructor of its thread-specific data frees it again
//                     as the thread ends (destructor_free; glibc aborts)
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static char *volatile p;
static volatile int inside = 16;

NOINLINE void first_free(void) { free(p); }
NOINLINE void second_free(void) { free(p); }
NOINLINE void interior_free(void) { free(p + inside); }
NOINLINE size_t usable_after_free(void) { return malloc_usable_size(p); }
NOINLINE void write_after_free(void) { p[3] = 1; }
NOINLINE void leak_after_free(void) { p = malloc(1234); }

NOINLINE void *churn(void *arg)
{
	void *blocks[50];

	for (int i = 0; i < 50; i++)
		blocks[i] = malloc(24 + 8 * (i % 5));
	for (int i = 0; i < 50; i++)
		free(blocks[i]);
	return arg;
}

static pthread_key_t key;

NOINLINE void thread_first_free(void) { free(p); }
NOINLINE void destructor_free(void *q) { free(q); }

NOINLINE void *free_then_end(void *arg)
{
	p = malloc(100);
	thread_first_free();
	pthread_setspecific(key, p);
	return arg;
}

static void run_threads(int n, void *(*fn)(void *))
{
	pthread_t t[4];

	for (int i = 0; i < n; i++)
		pthread_create(&t[i], 0, fn, 0);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], 0);
}

int main(int argc, char **argv)
{
	p = malloc(100);
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "double") == 0) {
		first_free();
		second_free();
	} else if (strcmp(argv[1], "threads") == 0) {
		run_threads(4, churn);
	} else if (strcmp(argv[1], "thread-double") == 0) {
		pthread_key_create(&key, destructor_free);
		run_threads(1, free_then_end);
	} else if (strcmp(argv[1], "interior") == 0) {
		interior_free();
	} else if (strcmp(argv[1], "usable") == 0) {
		first_free();
		usable_after_free();
	} else if (strcmp(argv[1], "write") == 0) {
		first_free();
		write_after_free();
		leak_after_free();
	}
	return 0;
}
