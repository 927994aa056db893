// pingpong passes one block at a time from main to a second thread,
// through a mailbox of one slot: main mallocs a block of 100 bytes
// (pingpong_make) and waits until the other thread has freed it
// (pingpong_take). glibc hands the same few blocks back to main over and
// over, so that when each thread hands its calls over a batch at a time,
// one address is freed many times in the other thread's batches before
// main's batch with its allocations comes. Then main allocates two blocks
// of 3000 bytes it never frees (pingpong_keep), and ends the process by
// MODE: exit (returning from main) or _exit (calling _exit(0), while its
// batch still holds its last allocations), or wait, for a tracer that
// attaches: it prints "ready" and waits for a line on its standard input
// before it starts, and once done, for the end of its standard input
// before it returns from main. With realloc last, the other
// thread grows each block with realloc before it frees it: realloc goes to
// the shim's unbatched sites, where the block's allocation may still be in
// main's batch.
//
//   pingpong N exit|_exit|wait [realloc]
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static sem_t full, empty;
static void *slot;
static int n, grow;
/* Where the blocks never freed stay reachable. */
void *kept[2];

NOINLINE void *pingpong_make(void) { return malloc(100); }
NOINLINE void pingpong_take(void *p)
{
	if (grow) {
		void *q = realloc(p, 300);

		if (q != NULL)
			p = q;
	}
	free(p);
}
NOINLINE void *pingpong_keep(void) { return malloc(3000); }

static void *consume(void *arg)
{
	(void)arg;
	for (int i = 0; i < n; i++) {
		sem_wait(&full);
		pingpong_take(slot);
		sem_post(&empty);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	char line[64];
	bool waiting;

	if ((argc != 3 && !(argc == 4 && strcmp(argv[3], "realloc") == 0)) ||
	    (strcmp(argv[2], "exit") != 0 && strcmp(argv[2], "_exit") != 0 && strcmp(argv[2], "wait") != 0)) {
		fprintf(stderr, "usage: pingpong N exit|_exit|wait [realloc]\n");
		return 2;
	}
	grow = argc == 4;
	waiting = strcmp(argv[2], "wait") == 0;
	if (waiting) {
		printf("ready\n");
		fflush(stdout);
		if (fgets(line, sizeof(line), stdin) == NULL)
			return 1;
	}
	n = atoi(argv[1]);
	sem_init(&full, 0, 0);
	sem_init(&empty, 0, 1);
	pthread_create(&t, NULL, consume, NULL);
	for (int i = 0; i < n; i++) {
		sem_wait(&empty);
		slot = pingpong_make();
		sem_post(&full);
	}
	pthread_join(t, NULL);
	kept[0] = pingpong_keep();
	kept[1] = pingpong_keep();
	printf("pingpong %d\n", n);
	fflush(stdout);
	if (strcmp(argv[2], "_exit") == 0)
		_exit(0);
	while (waiting && fgets(line, sizeof(line), stdin) != NULL)
		;
	return 0;
}
