// grower makes its live blocks grow in steps, the workload that makes
// mdtrace's live table add tiers: in each of THREADS threads (1 if not
// given), BATCHES times, it mallocs PER blocks of 100 bytes from grow_batch
// and sleeps MS milliseconds. Then each thread frees every other block it
// made, grows every tenth of those left by realloc (to 200 bytes, from
// grow_realloc), and the rest stay live at exit.
//
//   grower BATCHES PER MS [THREADS]
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static void **blocks;
static int batches, per, ms;

NOINLINE void grow_batch(int from, int n)
{
	for (int i = from; i < from + n; i++)
		blocks[i] = malloc(100);
}

NOINLINE void grow_realloc(int i) { blocks[i] = realloc(blocks[i], 200); }

static void *grow(void *arg)
{
	int first = (int)(long)arg * batches * per, n = batches * per;
	struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000};

	for (int b = 0; b < batches; b++) {
		grow_batch(first + b * per, per);
		nanosleep(&pause, 0);
	}
	for (int i = 0; i < n; i += 2)
		free(blocks[first + i]);
	for (int i = 1; i < n; i += 20)
		grow_realloc(first + i);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5)
		return 2;
	batches = atoi(argv[1]), per = atoi(argv[2]), ms = atoi(argv[3]);
	int threads = argc == 5 ? atoi(argv[4]) : 1;
	pthread_t t[64];

	if (threads < 1 || threads > 64 || per % 2 || (batches * per) % 20)
		return 2;
	blocks = calloc((size_t)threads * batches * per, sizeof(void *));
	for (int i = 1; i < threads; i++)
		pthread_create(&t[i], 0, grow, (void *)(long)i);
	grow(0);
	for (int i = 1; i < threads; i++)
		pthread_join(t[i], 0);
	free(blocks);
	return 0;
}
