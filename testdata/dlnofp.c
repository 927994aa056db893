// dlnofp (with an argument: once it has read a line of its standard
// input, for mdtrace to attach first) loads libdlnofp.so
// from its own directory, whose constructor leaks a block of 3001 bytes,
// and calls its dlnofp_run, which leaks one of 3002; both from the bottom
// of a chain of three of the library's functions. It prints "dlnofp:
// done" and reads its input to the end before it exits. Built as
// distributions build code, -O2 without frame pointers, as the library
// is: a walk through the library's frames needs its unwind table, which
// mdtrace loads only once it has read the loader's notice of the dlopen.
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void *volatile handle;

__attribute__((noinline)) void *load_library(const char *path)
{
	void *h = dlopen(path, RTLD_NOW);
	/* Not a tail call: the frame stays on the stack. */
	__asm__ volatile("" : : "r"(h) : "memory");
	return h;
}

__attribute__((noinline)) void run_library(void (*run)(int))
{
	run(3002);
	__asm__ volatile("" : : : "memory");
}

int main(int argc, char **argv)
{
	char path[PATH_MAX], line[64];
	if (argc > 1 && !fgets(line, sizeof(line), stdin))
		return 1;
	snprintf(path, sizeof(path), "%s", argv[0]);
	char *slash = strrchr(path, '/');
	snprintf(slash ? slash + 1 : path, sizeof(path) - (slash ? (size_t)(slash + 1 - path) : 0), "libdlnofp.so");
	handle = load_library(path);
	if (!handle) {
		fprintf(stderr, "dlnofp: %s\n", dlerror());
		return 1;
	}
	void (*run)(int) = (void (*)(int))dlsym(handle, "dlnofp_run");
	run_library(run);
	printf("dlnofp: done\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
