// busyleak is a busy process that leaks on command, for mdtrace --all
// --inject: a thread mallocs and frees blocks of 64 bytes without a pause
// from the start, while the main thread reads commands on standard input,
// one a line, and answers each once done:
//
//   hold     mallocs 3000 blocks of 1024 bytes from hold_block, kept ("held")
//   release  frees them ("released")
//   leak     the leaks of testdata/sampled: 20000 blocks of 64 bytes from
//            leak_small, 2000 of 4096 from leak_large, 2000 of 2048 from
//            leak_grown, each grown by realloc from 16 and 256 bytes
//            ("leaked")
//   exec     executes itself anew (it says "ready" again)
//   exit     stops the thread and exits 0, saying how many pairs it made
//   spin     starts the thread's loop, if BUSYLEAK_IDLE held it ("spinning")
//   fork     forks a child that mallocs 1000 blocks of 4096 bytes from
//            leak_large, kept, says "child PID leaked", and exits 2 s later
//   burst    mallocs 10000 blocks of 4096 bytes from leak_burst, kept, each
//            after 7 pairs of 64 bytes, without a pause ("burst"): the
//            process is given the shim in the middle of it
//
// With BUSYLEAK_SECCOMP set in its environment it first puts itself under a
// seccomp filter that allows every system call, as a sandboxed service is.
// With BUSYLEAK_IDLE set, the thread makes one pair and waits for "spin":
// until then, the process calls the allocator only on command.
//
// Built as distributions build code (-O2, no frame pointers).
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define HELD 3000

static void *volatile sink;
/* A null pointer the compiler cannot see: realloc(NULL, n) would become malloc(n). */
static void *volatile none;
static void *held[HELD];
static volatile int stop, idle;

NOINLINE void hold_block(int i) { held[i] = malloc(1024); }
NOINLINE void leak_small(void) { sink = malloc(64); }
NOINLINE void leak_large(void) { sink = malloc(4096); }
NOINLINE void leak_burst(void) { sink = malloc(4096); }

NOINLINE void leak_realloc_null(void) { sink = realloc(none, 4096); }
NOINLINE void leak_aligned(void) { sink = aligned_alloc(16, 4096); }

NOINLINE void free_by_realloc(void)
{
	sink = malloc(8192);
	sink = realloc(sink, 0);
}

NOINLINE void churn_realloc_null(void)
{
	sink = realloc(none, 64);
	free(sink);
}

NOINLINE void churn_aligned(void)
{
	sink = aligned_alloc(16, 64);
	free(sink);
}

NOINLINE void leak_grown(void)
{
	void *p = malloc(16);

	p = realloc(p, 256);
	sink = realloc(p, 2048);
}

static void *busy(void *arg)
{
	unsigned long *pairs = arg;

	while (!stop) {
		void *volatile p = malloc(64);

		free(p);
		++*pairs;
		while (idle && !stop)
			usleep(1000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static unsigned long pairs;
	char line[64];
	pthread_t t;

	(void)argc;
	if (getenv("BUSYLEAK_SECCOMP") != NULL) {
		struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		struct sock_fprog prog = {1, &allow};

		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
			return 1;
	}
	idle = getenv("BUSYLEAK_IDLE") != NULL;
	if (pthread_create(&t, NULL, busy, &pairs) != 0)
		return 1;
	/* Its calls bound, before anyone reads the GOT. */
	while (__atomic_load_n(&pairs, __ATOMIC_RELAXED) == 0)
		;
	setvbuf(stdout, NULL, _IONBF, 0);
	puts("ready");
	while (fgets(line, sizeof(line), stdin) != NULL) {
		if (strcmp(line, "hold\n") == 0) {
			for (int i = 0; i < HELD; i++)
				hold_block(i);
			puts("held");
		} else if (strcmp(line, "release\n") == 0) {
			for (int i = 0; i < HELD; i++)
				free(held[i]);
			puts("released");
		} else if (strcmp(line, "leak\n") == 0) {
			for (int i = 0; i < 20000; i++)
				leak_small();
			for (int i = 0; i < 2000; i++)
				leak_large();
			for (int i = 0; i < 2000; i++)
				leak_grown();
			for (int i = 0; i < 1000; i++) {
				leak_realloc_null();
				leak_aligned();
				free_by_realloc();
			}
			for (int i = 0; i < 20000; i++) {
				churn_realloc_null();
				churn_aligned();
			}
			puts("leaked");
		} else if (strcmp(line, "exec\n") == 0) {
			stop = 1;
			pthread_join(t, NULL);
			execv("/proc/self/exe", argv);
			return 1;
		} else if (strcmp(line, "fork\n") == 0) {
			pid_t c = fork();

			if (c == 0) {
				for (int i = 0; i < 1000; i++)
					leak_large();
				printf("child %d leaked\n", (int)getpid());
				sleep(2);
				_exit(0);
			}
			if (c < 0)
				return 1;
		} else if (strcmp(line, "burst\n") == 0) {
			for (int i = 0; i < 10000; i++) {
				for (int j = 0; j < 7; j++) {
					void *volatile p = malloc(64);

					free(p);
				}
				leak_burst();
			}
			puts("burst");
		} else if (strcmp(line, "spin\n") == 0) {
			idle = 0;
			puts("spinning");
		} else if (strcmp(line, "exit\n") == 0) {
			break;
		}
	}
	stop = 1;
	pthread_join(t, NULL);
	printf("pairs %lu\n", pairs);
	return 0;
}
