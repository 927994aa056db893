// prefree allocates COUNT blocks of 48 bytes, says "ready" and waits for a
// line on standard input (mdtrace -p --inject attaches meanwhile), then
// frees them all, while a second thread holds ten blocks it allocated
// after the attach, and says "done"; it exits at the next line or at the
// end of its input. Its frees are of blocks from before the attach, which
// no batch can match. It uses no stdio, which would allocate.
//
//   prefree COUNT
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static void *volatile *blocks;
static void *volatile held[10];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int state;

static void wait_line(void)
{
	char c;

	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

// holder allocates its ten blocks, which stay in its thread's batch, and
// waits until the frees are over.
static void *holder(void *arg)
{
	(void)arg;
	for (int i = 0; i < 10; i++)
		held[i] = malloc(100 + i);
	pthread_mutex_lock(&lock);
	state = 1;
	pthread_cond_broadcast(&cond);
	while (state != 2)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < 10; i++)
		free(held[i]);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0;
	pthread_t t;

	if (n <= 0)
		return 2;
	blocks = malloc(n * sizeof(void *));
	for (int i = 0; i < n; i++)
		blocks[i] = malloc(48);
	write(1, "ready\n", 6);
	wait_line();
	if (pthread_create(&t, NULL, holder, NULL) != 0)
		return 1;
	pthread_mutex_lock(&lock);
	while (state != 1)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < n; i++)
		free(blocks[i]);
	pthread_mutex_lock(&lock);
	state = 2;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	pthread_join(t, NULL);
	write(1, "done\n", 5);
	wait_line();
	return 0;
}
