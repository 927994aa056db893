// slowload keeps the loader's lock held in a second thread, so that a
// dlopen mdtrace makes its main thread call cannot return until it is let
// go: the test of a call left in the process by an mdtrace that was killed.
//
// Its main thread sets an alternate signal stack and blocks SIGUSR2, then
// starts a thread that dlopen's libslowload.so, next to the program, and
// waits for that thread (pthread_join). The library's constructor, once the
// main thread sleeps there, says "loading" and waits for a line on
// standard input, the loader's lock held. Once the thread is done, the main
// thread checks that its signal stack and mask are as it set them, says so
// ("joined altstack ok mask ok"), and exits with status 0 when standard
// input closes.
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[PATH_MAX];
static char altstack[65536];

static void *load(void *arg)
{
	(void)arg;
	if (dlopen(path, RTLD_NOW) == NULL) {
		fprintf(stderr, "slowload: %s\n", dlerror());
		exit(2);
	}
	return NULL;
}

int main(void)
{
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);
	if (n < 0)
		return 2;
	path[n] = 0;
	strcpy(strrchr(path, '/') + 1, "libslowload.so");

	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof(altstack)};
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR2);
	if (sigaltstack(&ss, NULL) != 0 || pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0)
		return 2;

	pthread_t t;
	if (pthread_create(&t, NULL, load, NULL) != 0 || pthread_join(t, NULL) != 0)
		return 2;

	stack_t now;
	sigset_t blocked;
	sigaltstack(NULL, &now);
	pthread_sigmask(SIG_BLOCK, NULL, &blocked);
	int alt = now.ss_sp == altstack && now.ss_size == sizeof(altstack) && now.ss_flags == 0;
	int masked = sigismember(&blocked, SIGUSR2) && !sigismember(&blocked, SIGUSR1);
	printf("joined altstack %s mask %s\n", alt ? "ok" : "changed", masked ? "ok" : "changed");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) == 1)
		;
	return 0;
}
