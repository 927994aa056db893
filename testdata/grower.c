// grower makes its live blocks grow in steps, the workload that makes
// mdtrace's live table add tiers: BATCHES times, it mallocs PER blocks of
// 100 bytes from grow_batch and sleeps MS milliseconds. Then every other
// block is freed, every tenth of those left is grown by realloc (to 200
// bytes, from grow_realloc), and the rest stay live at exit.
//
//   grower BATCHES PER MS
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static void **blocks;

NOINLINE void grow_batch(int from, int n)
{
	for (int i = from; i < from + n; i++)
		blocks[i] = malloc(100);
}

NOINLINE void grow_realloc(int i) { blocks[i] = realloc(blocks[i], 200); }

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int batches = atoi(argv[1]), per = atoi(argv[2]), ms = atoi(argv[3]);
	struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000};

	blocks = calloc((size_t)batches * per, sizeof(void *));
	for (int b = 0; b < batches; b++) {
		grow_batch(b * per, per);
		nanosleep(&pause, 0);
	}
	for (int i = 0; i < batches * per; i += 2)
		free(blocks[i]);
	for (int i = 1; i < batches * per; i += 20)
		grow_realloc(i);
	free(blocks);
	return 0;
}
