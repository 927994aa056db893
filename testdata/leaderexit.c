// leaderexit: the main thread leaks a block and ends alone (pthread_exit);
// its second thread waits until it has ended, leaks three blocks, frees a
// thousand, and ends the process with status 3. "forked" does the same in
// a child of a fork, which the parent waits for, then exits with the
// child's status. With "hold", the second thread says when the main thread
// has ended and waits for a line before it allocates, then for standard
// input to close before it ends the process. With "traced", it first waits
// (5 s at most) until a tracer holds it, as mdtrace's program mode does once
// it has heard of its exec. Built as distributions build code (-O2, no frame
// pointers).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile kept[4];
static pthread_t leader;
static int hold;

NOINLINE void leader_leak(void) { kept[0] = malloc(1111); }
NOINLINE void thread_leak_one(void) { kept[1] = malloc(2222); }
NOINLINE void thread_leak_two(void) { kept[2] = calloc(1, 2223); }
NOINLINE void thread_leak_three(void) { kept[3] = realloc(NULL, 2224); }

static void *outlive(void *arg)
{
	(void)arg;
	// Returns once the main thread has ended.
	pthread_join(leader, NULL);
	if (hold) {
		char c;

		write(1, "leader gone\n", 12);
		while (read(0, &c, 1) == 1 && c != '\n')
			;
	}
	thread_leak_one();
	thread_leak_two();
	thread_leak_three();
	for (int i = 0; i < 1000; i++)
		free(malloc(64));
	write(1, "outlived\n", 9);
	if (hold) {
		char c;
		while (read(0, &c, 1) > 0)
			;
	}
	exit(3);
}

static void run(void)
{
	pthread_t t;

	leader = pthread_self();
	leader_leak();
	pthread_create(&t, NULL, outlive, NULL);
	pthread_exit(NULL);
}

/* traced reports whether a tracer holds the process (TracerPid). */
static int traced(void)
{
	char line[256];
	int pid = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "TracerPid: %d", &pid) == 1)
			break;
	fclose(f);
	return pid != 0;
}

int main(int argc, char **argv)
{
	hold = argc > 1 && strcmp(argv[1], "hold") == 0;
	if (argc > 1 && strcmp(argv[1], "traced") == 0)
		for (int i = 0; i < 5000 && !traced(); i++)
			usleep(1000);
	if (argc > 1 && strcmp(argv[1], "forked") == 0) {
		int st;
		pid_t c = fork();

		if (c == 0)
			run();
		if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st))
			return 1;
		return WEXITSTATUS(st);
	}
	run();
}
