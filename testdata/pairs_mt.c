// pairs_mt times N malloc/free pairs of 32 to 96 bytes made by T threads
// (default 4), each N/T of them, and prints the wall-clock nanoseconds per
// pair overall: "pairs N NS_PER_PAIR".
//
//   pairs_mt [N [T]]
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long per_thread;
static pthread_barrier_t start;

// The span of one thread's pairs, in nanoseconds.
struct span {
	double begin, end;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *worker(void *arg)
{
	struct span *s = arg;
	void *volatile p;
	// One pair of each size first, untimed: the thread's arena is set up
	// once per thread, not per pair.
	for (long i = 0; i < 65; i++) {
		p = malloc(32 + i);
		free(p);
	}
	pthread_barrier_wait(&start);
	s->begin = now();
	for (long i = 0; i < per_thread; i++) {
		p = malloc(32 + (i * 7) % 65);
		free(p);
	}
	s->end = now();
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	long t = argc > 2 ? atol(argv[2]) : 4;
	if (t < 1 || t > 1024) {
		fprintf(stderr, "pairs_mt: T must be 1 to 1024\n");
		return 2;
	}
	per_thread = n / t;
	pthread_t *th = calloc(t, sizeof *th);
	struct span *spans = calloc(t, sizeof *spans);
	if (th == NULL || spans == NULL)
		return 1;
	// The threads start together, and the wall-clock time runs from the
	// first thread's first pair to the last thread's last one: neither
	// thread creation nor the order the scheduler runs them in counts.
	pthread_barrier_init(&start, NULL, t);
	for (long i = 0; i < t; i++)
		if (pthread_create(&th[i], NULL, worker, &spans[i]) != 0) {
			fprintf(stderr, "pairs_mt: cannot create thread %ld\n", i);
			return 1;
		}
	double t0 = 0, t1 = 0;
	for (long i = 0; i < t; i++) {
		pthread_join(th[i], NULL);
		if (i == 0 || spans[i].begin < t0)
			t0 = spans[i].begin;
		if (i == 0 || spans[i].end > t1)
			t1 = spans[i].end;
	}
	long total = per_thread * t;
	printf("pairs %ld %.1f\n", total, total > 0 ? (t1 - t0) / total : 0.0);
	free(spans);
	free(th);
	return 0;
}
