// attachee is a target for attach mode. It allocates blocks, says "ready",
// waits for a line on standard input (the tracer attaches meanwhile), then
// frees the blocks it made before, leaks three new ones from known
// functions, churns, and exits when standard input closes or a second line
// arrives.
//
// "attachee leader-exit" has a second thread from the start; after the
// second line its main thread ends alone (pthread_exit), and the second
// thread ends the process, with status 0, when standard input closes. It
// has glibc load libgcc_s at its start (backtrace), which pthread_exit
// would load, so that its maps stay as they are from "done" on; with no
// call of dlopen of its own, whose GOT slot --inject would route.
//
// "attachee usr1" counts the SIGUSR1 it takes (SA_RESTART), and says
// "done usr1 N ymm ok" instead of "done": through its wait for the first
// line it holds a pattern in ymm15's upper half (system calls keep it),
// and says "ymm changed" if it is not there after ("ymm none" without
// AVX).
#include <execinfo.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile before[5];
static void *volatile leaks[3];

NOINLINE void allocate_before(void)
{
	for (int i = 0; i < 5; i++)
		before[i] = malloc(2001 + i);
}

NOINLINE void attach_leak_one(void) { leaks[0] = malloc(3001); }
NOINLINE void attach_leak_two(void) { leaks[1] = calloc(1, 3002); }
NOINLINE void attach_leak_three(void) { leaks[2] = realloc(NULL, 3003); }

static void wait_line(void)
{
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

// wait_line_ymm is wait_line with a pattern in ymm15's upper half all
// through, made of raw system calls; it says whether the pattern is still
// there after.
static const char *wait_line_ymm(void)
{
	static const unsigned long long pattern[4] = {1, 2, 0x1122334455667788ULL, 0x99aabbccddeeff00ULL};
	unsigned long long got[4];
	char c;

	if (!__builtin_cpu_supports("avx")) {
		wait_line();
		return "none";
	}
	__asm__ volatile("vmovdqu (%[pattern]), %%ymm15\n"
			 "1: xorl %%eax, %%eax\n"
			 "xorl %%edi, %%edi\n"
			 "movq %[c], %%rsi\n"
			 "movl $1, %%edx\n"
			 "syscall\n"
			 "cmpq $1, %%rax\n"
			 "jne 2f\n"
			 "cmpb $10, (%[c])\n"
			 "jne 1b\n"
			 "2: vmovdqu %%ymm15, (%[got])\n"
			 "vzeroupper\n"
			 :
			 : [pattern] "r"(pattern), [c] "r"(&c), [got] "r"(got)
			 : "rax", "rcx", "rdx", "rsi", "rdi", "r11", "xmm15", "memory");
	return memcmp(got, pattern, sizeof(got)) == 0 ? "ok" : "changed";
}

static sem_t leader_gone;
static volatile sig_atomic_t usr1_taken;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_taken++;
}

static void *outlive_leader(void *arg)
{
	(void)arg;
	sem_wait(&leader_gone);
	wait_line();
	exit(0);
}

int main(int argc, char **argv)
{
	int leader_exit = argc > 1 && strcmp(argv[1], "leader-exit") == 0;
	int usr1 = argc > 1 && strcmp(argv[1], "usr1") == 0;
	pthread_t t;
	if (usr1) {
		struct sigaction sa = {0};

		sa.sa_handler = on_usr1;
		sa.sa_flags = SA_RESTART;
		sigaction(SIGUSR1, &sa, NULL);
	}
	if (leader_exit) {
		void *pc;

		if (backtrace(&pc, 1) != 1)
			return 2;
		sem_init(&leader_gone, 0, 0);
		pthread_create(&t, NULL, outlive_leader, NULL);
	}
	allocate_before();
	write(1, "ready\n", 6);
	const char *ymm = usr1 ? wait_line_ymm() : (wait_line(), "");
	for (int i = 0; i < 5; i++)
		free(before[i]);
	attach_leak_one();
	attach_leak_two();
	attach_leak_three();
	for (int i = 0; i < 1000; i++)
		free(malloc(64));
	if (usr1) {
		char line[64];
		int n = snprintf(line, sizeof(line), "done usr1 %d ymm %s\n", (int)usr1_taken, ymm);
		write(1, line, n);
	} else {
		write(1, "done\n", 5);
	}
	wait_line();
	if (leader_exit) {
		sem_post(&leader_gone);
		pthread_exit(NULL);
	}
	return 0;
}
