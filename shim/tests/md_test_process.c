// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Threads, fork, and the control channel's signals and stats (md_test.c runs
 * them).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "md_test.h"

/* Many threads allocate, check and free; no report is expected. */
static void *stress_thread(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	uint8_t *slots[64] = { 0 };
	size_t sizes[64] = { 0 };

	for (int iter = 0; iter < 20000; iter++) {
		int i = rand_r(&seed) % 64;
		size_t size = (size_t)(rand_r(&seed) % 3000);

		if (slots[i] != NULL) {
			for (size_t j = 0; j < sizes[i]; j++)
				if (slots[i][j] != (uint8_t)(i + j)) {
					fprintf(stderr, "FAIL: stress data corrupted\n");
					failures++;
					break;
				}
			if (rand_r(&seed) % 4 == 0) {
				uint8_t *q = realloc(slots[i], size + 1);

				if (q == NULL) {
					failures++;
					continue;
				}
				slots[i] = q;
				for (size_t j = 0; j < size + 1; j++)
					q[j] = (uint8_t)(i + j);
				sizes[i] = size + 1;
				continue;
			}
			free(slots[i]);
			slots[i] = NULL;
		}
		switch (rand_r(&seed) % 4) {
		case 0:
			slots[i] = malloc(size);
			break;
		case 1:
			slots[i] = calloc(1, size);
			break;
		case 2:
			slots[i] = memalign(64, size);
			break;
		default:
			slots[i] = realloc(NULL, size);
			break;
		}
		sizes[i] = size;
		for (size_t j = 0; j < size; j++)
			slots[i][j] = (uint8_t)(i + j);
	}
	for (int i = 0; i < 64; i++)
		free(slots[i]);
	return NULL;
}

int test_threads(void)
{
	pthread_t t[8];

	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1)) == 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	fprintf(stderr, "threads done\n");
	return 0;
}

static volatile int stop_loop;

static void *loop_thread(void *arg)
{
	(void)arg;
	while (!stop_loop) {
		void *p = malloc(64);

		free(p);
		p = calloc(3, 100);
		free(p);
	}
	return NULL;
}

/* A thread keeps the allocator busy while the main thread forks; children must not hang. */
int test_fork(void)
{
	pthread_t t;
	int hung = 0;

	CHECK(pthread_create(&t, NULL, loop_thread, NULL) == 0);
	for (int i = 0; i < 50; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			for (int j = 0; j < 100; j++)
				free(malloc((size_t)j * 10));
			_exit(0);
		}
		CHECK(pid > 0);
		int status = -1, waited = 0;
		while (waitpid(pid, &status, WNOHANG) == 0) {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
			if (++waited > 10000) {
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				hung++;
				break;
			}
		}
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	stop_loop = 1;
	pthread_join(t, NULL);
	CHECK(hung == 0);
	fprintf(stderr, "forks done\n");
	return 0;
}

int test_plain(void)
{
	void *p = opaque(malloc(100));

	memset(p, 1, 100);
	p = opaque(realloc(p, 1000));
	free(p);
	fprintf(stderr, "ran\n");
	return 0;
}

/*
 * The control channel's workloads (shim/ctl.c). ctl_pid prints the process
 * id as "pid=N" for run.sh to put PID in its place. ctl_signals sends
 * itself 45 to 49 (SIGRTMAX-19 to SIGRTMAX-15) in turn, each followed by a
 * malloc and a free so that the shim acts on it. ctl_stats does the same
 * with 49 alone. ctl_wait prints "ready" once the shim is set up and waits
 * for a line on standard input, for signals sent from outside.
 */
static void ctl_say_pid(void)
{
	printf("pid=%d\n", (int)getpid());
	fflush(stdout);
}

static void ctl_raise(int sig)
{
	CHECK(kill(getpid(), sig) == 0);
	free(opaque(malloc(10)));
	fprintf(stderr, "raised %d\n", sig);
}

int test_ctl_pid(void)
{
	free(opaque(malloc(10)));
	ctl_say_pid();
	fprintf(stderr, "ran\n");
	return 0;
}

int test_ctl_signals(void)
{
	free(opaque(malloc(10)));
	for (int sig = SIGRTMAX - 19; sig <= SIGRTMAX - 15; sig++)
		ctl_raise(sig);
	return 0;
}

int test_ctl_stats(void)
{
	free(opaque(malloc(10)));
	ctl_raise(SIGRTMAX - 15);
	return 0;
}

int test_ctl_wait(void)
{
	char line[16];

	free(opaque(malloc(10)));
	printf("ready\n");
	fflush(stdout);
	CHECK(fgets(line, sizeof(line), stdin) != NULL);
	free(opaque(malloc(10)));
	fprintf(stderr, "ran\n");
	return 0;
}
