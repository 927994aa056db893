// pairs times N malloc/free pairs of 32 to 96 bytes and prints the mean
// nanoseconds per pair: "pairs N NS_PER_PAIR".
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	void *volatile p;
	// One pair of each size first, untimed: the allocator's set-up (and a
	// preloaded library's) is paid once by any program, not per pair.
	for (long i = 0; i < 65; i++) {
		p = malloc(32 + i);
		free(p);
	}
	double t0 = now();
	for (long i = 0; i < n; i++) {
		p = malloc(32 + (i * 7) % 65);
		free(p);
	}
	double t1 = now();
	printf("pairs %ld %.1f\n", n, (t1 - t0) / n);
	return 0;
}
