// forkcheck forks children that allocate, from threads ptrace does not
// report, or while mdtrace is attached without following forks: each child
// mallocs and frees, keeps one block of 777 bytes (child_work), then exits
// with status 7, and must not crash.
//
//   forkcheck thread   a second thread forks one child (twice: once
//                      before its first allocation, once after)
//   forkcheck wait     prints "ready", then at each line on its input
//                      forks one child; at the end of its input prints
//                      how the children ended
//
// Each child's end is printed as "child: exit 7" or "child: signal N".
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

void *child_kept;

NOINLINE void child_work(void)
{
	free(malloc(100));
	free(malloc(5000));
	child_kept = malloc(777);
}

static void fork_one(void)
{
	int st;
	pid_t c;

	/* The parent allocates first: the kernel optimizes a probe at its first hit. */
	free(malloc(16));
	c = fork();

	if (c == 0) {
		child_work();
		_exit(7);
	}
	waitpid(c, &st, 0);
	if (WIFEXITED(st))
		printf("child: exit %d\n", WEXITSTATUS(st));
	else
		printf("child: signal %d\n", WTERMSIG(st));
	fflush(stdout);
}

static void *in_thread(void *arg)
{
	(void)arg;
	fork_one();
	free(malloc(64));
	fork_one();
	return NULL;
}

int main(int argc, char **argv)
{
	char line[64];
	pthread_t t;

	if (argc == 2 && strcmp(argv[1], "thread") == 0) {
		free(malloc(32));
		pthread_create(&t, NULL, in_thread, NULL);
		pthread_join(t, NULL);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "wait") == 0) {
		free(malloc(32));
		printf("ready\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin) != NULL)
			fork_one();
		return 0;
	}
	fprintf(stderr, "usage: forkcheck thread|wait\n");
	return 2;
}
