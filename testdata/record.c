// record makes a fixed sequence of allocator calls for record_allocs, in
// main and in one thread, between two marker allocations (12345 and 12346
// bytes) so that tests can find it among the loader's and libc's calls.
//
//   record [hold]     with "hold", wait for a line on stdin before exiting
//   record stress N   4 threads, each N malloc/free pairs, then exit
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// A null the compiler cannot see: it would turn realloc(NULL, n) into malloc(n).
static void *volatile null;

static void *worker(void *arg)
{
	(void)arg;
	void *p = malloc(1000);
	free(p);
	return NULL;
}

static void *stress(void *arg)
{
	long n = (long)arg;
	for (long i = 0; i < n; i++)
		free(malloc(16 + i % 100));
	return NULL;
}

static void wait_line(void)
{
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "stress") == 0) {
		pthread_t t[4];
		long n = atol(argv[2]);
		for (int i = 0; i < 4; i++)
			pthread_create(&t[i], NULL, stress, (void *)n);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		write(1, "stress: done\n", 13);
		return 0;
	}
	pthread_t t;
	// The sequence; the thread comes after the end marker.
	free(malloc(12345));
	void *p = malloc(10);
	free(p);
	void *c = calloc(20, 1);
	void *r = realloc(null, 30);
	r = realloc(r, 2048);
	realloc(r, 0);
	free(NULL);
	void *m = memalign(16, 40);
	void *a = aligned_alloc(32, 64);
	void *pm = NULL;
	posix_memalign(&pm, 32, 50);
	void *v = valloc(100);
	void *pv = pvalloc(5000);
	free(c);
	free(m);
	free(a);
	free(pm);
	free(v);
	free(pv);
	free(malloc(12346));
	pthread_create(&t, NULL, worker, NULL);
	pthread_join(t, NULL);
	write(1, "record: done\n", 13);
	if (argc > 1 && strcmp(argv[1], "hold") == 0)
		wait_line();
	return 0;
}
