// forkspin forks without a pause, as a shell running commands does: a
// child that exits at once, waited for, between a few allocations. It says
// "ready" and waits for a line on standard input; then it allocates 200
// blocks of 4096 bytes, which it keeps, and forks until the next line
// comes, then prints "forks N longest M":
// its forks, and the longest of its rounds in ms (a round whose thread was
// held shows there).
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *held[200];
static void *volatile sink;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void)
{
	struct pollfd in = {0, POLLIN, 0};
	long forks = 0;
	double longest = 0;

	char c;

	printf("ready\n");
	fflush(stdout);
	while (read(0, &c, 1) == 1 && c != '\n')
		;
	for (int i = 0; i < 200; i++)
		held[i] = malloc(4096);
	while (poll(&in, 1, 0) == 0) {
		double t0 = now_ms();
		for (int i = 0; i < 20; i++) {
			sink = malloc(32 + i);
			free(sink);
		}
		pid_t child = fork();
		if (child == 0)
			_exit(0);
		if (child > 0) {
			waitpid(child, NULL, 0);
			forks++;
		}
		double t = now_ms() - t0;
		if (t > longest)
			longest = t;
	}
	for (int i = 0; i < 200; i++)
		free(held[i]);
	printf("forks %ld longest %.0f\n", forks, longest);
	return 0;
}
