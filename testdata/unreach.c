// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Blocks reachable in every way libmemunreachable's scan knows, and blocks
 * unreachable in every way, each of a size of its own (1001...), for the
 * reachability check and for valgrind's leak check to judge alike.
 *
 * Reachable: from a global (1001), from the main thread's TLS (1002) and
 * each thread's (1014), from each thread's stack while it is blocked in a
 * read (1003), from a register only of a thread blocked in a read (1004),
 * by an interior pointer (1005), from inside a block glibc maps by
 * itself that a global holds (1010), from main's stack (1013).
 * Unreachable: a cycle (two of 1006), a chain held by an unreachable block
 * (1007 -> 1008 -> 1009), a block held only from inside an unreachable
 * block glibc maps by itself (1011, held by 1048577), a lost block (1012).
 * At exit, the threads killed by exit_group have no registers left: the
 * block a register only held (1004) is unreachable then.
 *
 * The lost block (1012) holds LOST_TEXT, for the check's contents.
 *
 * It prints "ready" once all is in place, then waits for a line on its
 * standard input; then it exits (exit(0) from main: main's frame, the
 * threads' stacks and registers are still there), or with "join" lets its
 * threads end first. With "late" it first prints "started" and waits for a
 * line before it allocates anything else than a table a global holds, for a
 * tracer to attach meanwhile; four blocks made after (1015) are reachable
 * only from that table, which a tracer attached late does not know.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define THREADS 3
#define KEY 0x5a5a5a5a5a5a5a5aULL
#define LOST_TEXT "lost: nothing points here any more"

void *g_global;
char *g_interior;
void **g_big;
void **g_before;
__thread void *t_tls;
static int g_pipe[2];
static pthread_barrier_t g_ready;

/* escape makes p escape, so that the compiler keeps the block and the
 * stores into it even where the program never reads them. */
#define escape(p) __asm__ volatile("" : : "r"(p) : "memory")

/* scrub overwrites the stack below its caller, where the allocator's
 * frames left copies of the pointers it returned. */
__attribute__((noinline)) static void scrub(void)
{
	volatile char junk[8192];

	memset((char *)junk, 0, sizeof(junk));
}

static void wait_pipe(void)
{
	char c;

	while (read(g_pipe[0], &c, 1) < 0)
		;
}

static void *stack_thread(void *arg)
{
	void *volatile mine = malloc(1003);

	(void)arg;
	(void)mine;
	t_tls = malloc(1014);
	scrub();
	pthread_barrier_wait(&g_ready);
	wait_pipe();
	return NULL;
}

/* The block's only reference is r12 while the thread waits in read:
 * elsewhere it is kept xor-ed with KEY. */
__attribute__((noinline)) static void *register_thread(void *arg)
{
	volatile uintptr_t hidden = (uintptr_t)malloc(1004) ^ KEY;
	char c;
	long ret;

	(void)arg;
	t_tls = malloc(1014);
	scrub();
	pthread_barrier_wait(&g_ready);
	do {
		__asm__ volatile("mov %[h], %%r12\n\t"
				 "xor %[k], %%r12\n\t"
				 "syscall\n\t"
				 "xor %%r12, %%r12"
				 : "=a"(ret)
				 : "a"((long)SYS_read), "D"((long)g_pipe[0]), "S"(&c), "d"(1L),
				   [h] "r"((uintptr_t)hidden), [k] "r"(KEY)
				 : "r12", "rcx", "r11", "memory");
	} while (ret < 0);
	return NULL;
}

__attribute__((noinline)) static void *make_chain(void)
{
	void **d = malloc(1007), **e = malloc(1008);

	memset(d, 0, 1007);
	memset(e, 0, 1008);
	d[3] = e;
	e[5] = (char *)malloc(1009) + 100; /* interior */
	escape(d);
	return d;
}

__attribute__((noinline)) static void make_cycle(void)
{
	void **a = malloc(1006), **b = malloc(1006);

	memset(a, 0, 1006);
	memset(b, 0, 1006);
	a[0] = b;
	b[0] = a;
	escape(a);
}

__attribute__((noinline)) static void make_big(void)
{
	void **lost = malloc(1048577);

	g_big = malloc(1 << 20);
	memset(g_big, 0, 64);
	g_big[1] = malloc(1010);
	memset(lost, 0, 64);
	lost[2] = malloc(1011);
	escape(lost);
}

__attribute__((noinline)) static void make_lost(void)
{
	char *lost = malloc(1012);

	strcpy(lost, LOST_TEXT);
	escape(lost);
}

int main(int argc, char **argv)
{
	pthread_t th[THREADS + 1];
	void *volatile on_stack;
	char line[16];
	int join = argc > 1 && strcmp(argv[1], "join") == 0;

	if (argc > 1 && strcmp(argv[1], "late") == 0) {
		g_before = calloc(4, sizeof(void *));
		printf("started\n");
		fflush(stdout);
		if (fgets(line, sizeof(line), stdin) == NULL)
			return 1;
		for (int i = 0; i < 4; i++)
			g_before[i] = malloc(1015);
	}
	if (pipe(g_pipe) != 0)
		return 1;
	pthread_barrier_init(&g_ready, NULL, THREADS + 2);
	g_global = malloc(1001);
	t_tls = malloc(1002);
	g_interior = (char *)malloc(1005) + 500;
	make_cycle();
	make_chain();
	make_big();
	make_lost();
	on_stack = malloc(1013);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, stack_thread, NULL);
	pthread_create(&th[THREADS], NULL, register_thread, NULL);
	scrub();
	pthread_barrier_wait(&g_ready);
	printf("ready\n");
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
		line[0] = '\0';
	if (join) {
		char c[THREADS + 1] = { 0 };

		write(g_pipe[1], c, sizeof(c));
		for (int i = 0; i <= THREADS; i++)
			pthread_join(th[i], NULL);
	}
	(void)on_stack;
	exit(0);
}
