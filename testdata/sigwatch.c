// sigwatch is a target for --inject that takes signals while mdtrace makes
// its calls. A SIGALRM every 50 µs runs a handler that allocates, which the
// program allows only where it cannot interrupt the program's own calls of
// the allocator: SIGALRM is blocked around them and open while it sleeps.
// The handler records where it interrupted the program. Natively that is
// the program itself or its C library (the sleep, the change of the signal
// mask), never the dynamic loader or a library loaded after the start: a
// handler run on top of a call mdtrace makes the thread make (dlopen, the
// shim's functions) would be one, and is counted as foreign. It says
// "ready", runs until a line comes on standard input, then prints
// "handled N foreign M" and exits.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

struct range {
	uintptr_t lo, hi;
};

static struct range known[64];
static int nknown;
static volatile sig_atomic_t handled, foreign;
/* The first foreign pc, named at the end for the test's message. */
static volatile uintptr_t first_foreign;

static int note_module(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	/* The program (no name), and the C library: not the loader, not the vDSO. */
	if (info->dlpi_name[0] != '\0' && strstr(info->dlpi_name, "libc.so") == NULL)
		return 0;
	for (int i = 0; i < info->dlpi_phnum && nknown < 64; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			known[nknown].lo = info->dlpi_addr + ph->p_vaddr;
			known[nknown].hi = known[nknown].lo + ph->p_memsz;
			nknown++;
		}
	}
	return 0;
}

static void on_alarm(int sig, siginfo_t *si, void *ctx)
{
	uintptr_t pc = (uintptr_t)((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RIP];
	int inside = 0;

	(void)sig;
	(void)si;
	for (int i = 0; i < nknown; i++)
		if (pc >= known[i].lo && pc < known[i].hi)
			inside = 1;
	if (!inside && foreign++ == 0)
		first_foreign = pc;
	/* The program's own allocation, in its handler. */
	free(malloc(48));
	handled++;
}

int main(void)
{
	struct sigaction sa = {0};
	struct itimerval it = {{0, 50}, {0, 50}};
	struct timespec nap = {0, 200000};
	struct pollfd in = {0, POLLIN, 0};
	sigset_t alarm;
	void *blocks[50];

	dl_iterate_phdr(note_module, NULL);
	sigemptyset(&alarm);
	sigaddset(&alarm, SIGALRM);
	sigprocmask(SIG_BLOCK, &alarm, NULL);
	sa.sa_sigaction = on_alarm;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	/*
	 * nanosleep's first call binds it (lazy binding, in the loader): made
	 * before the timer runs, so that no signal ever lands in the loader
	 * natively (one run in 60 did, in the first sleep's binding).
	 */
	nanosleep(&(struct timespec){0, 0}, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	printf("ready\n");
	fflush(stdout);
	while (poll(&in, 1, 0) == 0) {
		for (int i = 0; i < 50; i++)
			blocks[i] = malloc(16 + i);
		for (int i = 0; i < 50; i++)
			free(blocks[i]);
		/* Signals come while it sleeps, and only then. */
		sigprocmask(SIG_UNBLOCK, &alarm, NULL);
		nanosleep(&nap, NULL);
		sigprocmask(SIG_BLOCK, &alarm, NULL);
	}
	printf("handled %d foreign %d\n", (int)handled, (int)foreign);
	if (foreign > 0) {
		Dl_info info = {0};

		dladdr((void *)first_foreign, &info);
		printf("first foreign pc %#lx: %s+%#lx (%s)\n", (unsigned long)first_foreign,
		       info.dli_fname ? info.dli_fname : "?", (unsigned long)(first_foreign - (uintptr_t)info.dli_fbase),
		       info.dli_sname ? info.dli_sname : "?");
	}
	return 0;
}
