// handoff passes blocks from thread to thread, the pattern in which a
// block's free can reach mdtrace before its allocation when each thread
// hands its calls over a batch at a time. PRODUCERS threads each malloc N
// blocks of 64 to 127 bytes (handoff_make) and queue them; CONSUMERS
// threads take them off the queue and free them (handoff_take). Then each
// producer allocates KEEP blocks of 4000 bytes it never frees
// (handoff_keep), frees one block of its own (handoff_churn), and waits,
// never to run again; main allocates two blocks of 3000 bytes it never
// frees (handoff_main), and ends the process, by MODE:
//
//   exit   returning from main
//   _exit  calling _exit(0), which runs no exit handlers
//   fork   forking first: the child, a copy of the process whose other
//          threads' last calls it holds in its memory but not their
//          threads, calls _exit(0) at once; the parent waits for it, then
//          calls _exit(0)
//
// With realloc last, the consumers grow each block with realloc before
// they free it: realloc goes to the shim's unbatched sites, where the
// block's allocation may still be in its producer's batch.
//
// The live blocks at the end (of each process, with fork) are exactly
// PRODUCERS*KEEP of 4000 bytes and two of 3000, however the calls were
// batched.
//
//   handoff N PRODUCERS CONSUMERS KEEP MODE [realloc]
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define QUEUE 1024

static void *queue[QUEUE];
static int head, count, producing;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static sem_t done;
static int n, keep, grow;
/* Where the blocks never freed stay reachable, as a program's would. */
void *kept[1024], *mine[2];

static void push(void *p)
{
	pthread_mutex_lock(&lock);
	while (count == QUEUE)
		pthread_cond_wait(&changed, &lock);
	queue[(head + count++) % QUEUE] = p;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

/* pop returns the next block, or NULL once the producers are done and the queue is empty. */
static void *pop(void)
{
	void *p = NULL;

	pthread_mutex_lock(&lock);
	while (count == 0 && producing > 0)
		pthread_cond_wait(&changed, &lock);
	if (count > 0) {
		p = queue[head];
		head = (head + 1) % QUEUE;
		count--;
		pthread_cond_broadcast(&changed);
	}
	pthread_mutex_unlock(&lock);
	return p;
}

NOINLINE void *handoff_make(int i) { return malloc(64 + i % 64); }
NOINLINE void handoff_take(void *p)
{
	if (grow) {
		void *q = realloc(p, 300);

		if (q != NULL)
			p = q;
	}
	free(p);
}
NOINLINE void *handoff_keep(void) { return malloc(4000); }
NOINLINE void handoff_churn(void) { free(malloc(500)); }
NOINLINE void *handoff_main(void) { return malloc(3000); }

static void *produce(void *arg)
{
	int id = (int)(long)arg;

	for (int i = 0; i < n; i++)
		push(handoff_make(i));
	pthread_mutex_lock(&lock);
	producing--;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < keep; i++)
		kept[(id * keep + i) % 1024] = handoff_keep();
	handoff_churn();
	sem_post(&done);
	for (;;)
		pause();
	return NULL;
}

static void *consume(void *arg)
{
	void *p;

	(void)arg;
	while ((p = pop()) != NULL)
		handoff_take(p);
	return NULL;
}

int main(int argc, char **argv)
{
	int producers, consumers;
	pthread_t t;

	if (argc != 6 && !(argc == 7 && strcmp(argv[6], "realloc") == 0)) {
		fprintf(stderr, "usage: handoff N PRODUCERS CONSUMERS KEEP exit|_exit|fork [realloc]\n");
		return 2;
	}
	grow = argc == 7;
	n = atoi(argv[1]);
	producers = atoi(argv[2]);
	consumers = atoi(argv[3]);
	keep = atoi(argv[4]);
	sem_init(&done, 0, 0);
	producing = producers;
	pthread_t cs[64];
	if (consumers > 64)
		consumers = 64;
	for (int i = 0; i < consumers; i++)
		pthread_create(&cs[i], NULL, consume, NULL);
	for (int i = 0; i < producers; i++)
		pthread_create(&t, NULL, produce, (void *)(long)i);
	for (int i = 0; i < producers; i++)
		sem_wait(&done);
	for (int i = 0; i < consumers; i++)
		pthread_join(cs[i], NULL);
	mine[0] = handoff_main();
	mine[1] = handoff_main();
	printf("handoff %d %d %d %d\n", n, producers, consumers, keep);
	fflush(stdout);
	if (strcmp(argv[5], "fork") == 0) {
		pid_t child = fork();

		if (child == 0)
			_exit(0);
		waitpid(child, NULL, 0);
	}
	if (strcmp(argv[5], "exit") != 0)
		_exit(0);
	return 0;
}
