// early makes its allocations in its first milliseconds, which a command
// launched by mdtrace runs while mdtrace loads its programs: every call
// is made before mdtrace is ready, and must still be in its reports. It
// writes "early: done" to standard error when its work is done, before it
// ends, by MODE:
//
//   keep N    allocates N blocks of 100 + i % 100 bytes (early_keep) and
//             returns from main without freeing them
//   churn N   allocates N blocks of 48 bytes, frees them oldest first (each
//             free is held until its batch is handed over: a thread holds
//             64 at most), keeps 10 blocks of 200 bytes (early_keep) and
//             returns from main
//   _exit N   a second thread allocates N blocks of 300 bytes (early_thread)
//             and waits; main keeps 2 blocks of 3000 bytes (early_main)
//             and calls _exit(0), which runs no exit handlers
//   fork N    keeps N blocks as keep does, then forks: the child keeps 5
//             blocks of 500 bytes (early_child) and returns from main; the
//             parent waits for it, then returns from main
//   exec N    keeps N blocks as keep does, then executes itself as
//             "early keep 5"
//
//   early MODE N
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

/* Where the blocks never freed stay reachable, as a program's would. */
void *kept[100000];
static int n;

NOINLINE void early_keep(int from, int count, size_t size, int vary)
{
	for (int i = 0; i < count; i++)
		kept[from + i] = malloc(size + (vary ? (size_t)(i % 100) : 0));
}

NOINLINE void early_child(void) { early_keep(n, 5, 500, 0); }

NOINLINE void *early_thread(void *arg)
{
	(void)arg;
	early_keep(n, n, 300, 0);
	fprintf(stderr, "early: done\n");
	_exit(0);
}

NOINLINE void early_main(void) { early_keep(2 * n, 2, 3000, 0); }

int main(int argc, char **argv)
{
	void **tmp;
	pthread_t t;
	int st;

	if (argc != 3 || (n = atoi(argv[2])) < 1 || n > 30000) {
		fprintf(stderr, "usage: early keep|churn|_exit|fork|exec N (1 to 30000)\n");
		return 2;
	}
	if (strcmp(argv[1], "keep") == 0) {
		early_keep(0, n, 100, 1);
	} else if (strcmp(argv[1], "churn") == 0) {
		tmp = malloc(n * sizeof(*tmp));
		for (int i = 0; i < n; i++)
			tmp[i] = malloc(48);
		for (int i = 0; i < n; i++)
			free(tmp[i]);
		free(tmp);
		early_keep(0, 10, 200, 0);
	} else if (strcmp(argv[1], "_exit") == 0) {
		early_main();
		/* The thread ends the process once its blocks are made. */
		pthread_create(&t, NULL, early_thread, NULL);
		pthread_join(t, NULL);
		return 1;
	} else if (strcmp(argv[1], "fork") == 0) {
		early_keep(0, n, 100, 1);
		pid_t c = fork();
		if (c == 0) {
			early_child();
			return 0;
		}
		waitpid(c, &st, 0);
	} else if (strcmp(argv[1], "exec") == 0) {
		early_keep(0, n, 100, 1);
		fprintf(stderr, "early: done\n");
		execl("/proc/self/exe", "early", "keep", "5", (char *)NULL);
		return 1;
	} else {
		return 2;
	}
	fprintf(stderr, "early: done\n");
	return 0;
}
