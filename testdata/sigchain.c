// sigchain leaks a block of 2345 bytes from a signal handler: main calls
// interrupted, which raises SIGUSR1; the handler, on the same stack, calls
// leak_in_handler. A backtrace of the block goes from the handler through
// the kernel's signal frame (glibc's __restore_rt) into raise and on to
// interrupted and main. Built -O2 without frame pointers. With "altstack",
// the handler runs on a signal stack of its own (sigaltstack), and the walk
// goes from it to the thread's stack.
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

__attribute__((noinline)) void leak_in_handler(void)
{
	sink = malloc(2345);
	__asm__ volatile("" : : : "memory");
}

__attribute__((noinline)) static void handler(int sig)
{
	(void)sig;
	leak_in_handler();
	__asm__ volatile("" : : : "memory");
}

__attribute__((noinline)) void interrupted(void)
{
	raise(SIGUSR1);
	__asm__ volatile("" : : : "memory");
}

int main(int argc, char **argv)
{
	static char alt[64 * 1024] __attribute__((aligned(16)));
	stack_t ss = {.ss_sp = alt, .ss_size = sizeof(alt)};
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	if (argc > 1 && strcmp(argv[1], "altstack") == 0) {
		sigaltstack(&ss, 0);
		sa.sa_flags = SA_ONSTACK;
	}
	sigaction(SIGUSR1, &sa, 0);
	interrupted();
	__asm__ volatile("" : : : "memory");
	return 0;
}
