// sigchain leaks a block of 2345 bytes from a signal handler: main calls
// interrupted, which raises SIGUSR1; the handler, on the same stack, calls
// leak_in_handler. A backtrace of the block goes from the handler through
// the kernel's signal frame (glibc's __restore_rt) into raise and on to
// interrupted and main. Built -O2 without frame pointers.
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

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigaction(SIGUSR1, &sa, 0);
	interrupted();
	__asm__ volatile("" : : : "memory");
	return 0;
}
