// leakinfo asks for its own live allocations with get_malloc_leak_info, the
// call libmdshim.so exports (it answers from mdtrace's table), and prints
// what it gets:
//
//   overall_size=N info_size=N total_memory=N backtrace_size=N entries=N
//   size=N num=N first_frame=NAME      (one line per entry, in buffer order)
//   null_check=ok                      (a NULL argument left the others alone)
//
// NAME is dladdr's name for the entry's first frame, or "?". The blocks it
// keeps live: 3 x 100 bytes from one call of alloc_small, 1 x 200 from alloc_medium and
// 1 x 9000 from alloc_large. Each SIGNAL argument is then raised, followed
// by a malloc and a free so that the shim acts on it; "raised SIGNAL" is
// printed after each.
//
//   leakinfo [SIGNAL...]
//
// It writes with write(2) only, so that stdio allocates nothing; exit status
// 0, or 2 when get_malloc_leak_info is not there (the shim is not loaded).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

typedef void get_fn(uint8_t **info, size_t *overall_size, size_t *info_size, size_t *total_memory,
		    size_t *backtrace_size);
typedef void free_fn(uint8_t *info);

static void *volatile sink[8];
static int nsink;

static void keep(void *p)
{
	sink[nsink++] = p;
}

NOINLINE void alloc_small(void) { keep(malloc(100)); }
NOINLINE void alloc_medium(void) { keep(malloc(200)); }
NOINLINE void alloc_large(void) { keep(malloc(9000)); }

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	write(1, line, (size_t)n);
}

static const char *frame_name(uintptr_t pc)
{
	Dl_info info;

	if (pc == 0 || dladdr((void *)pc, &info) == 0 || info.dli_sname == NULL)
		return "?";
	return info.dli_sname;
}

int main(int argc, char **argv)
{
	size_t overall = 0, info_size = 0, total = 0, bt = 0;
	uint8_t *info = NULL;
	get_fn *get = (get_fn *)dlsym(RTLD_DEFAULT, "get_malloc_leak_info");
	free_fn *release = (free_fn *)dlsym(RTLD_DEFAULT, "free_malloc_leak_info");

	if (get == NULL || release == NULL) {
		say("leakinfo: get_malloc_leak_info is not there: is libmdshim.so preloaded?\n");
		return 2;
	}
	for (int i = 0; i < 3; i++)
		alloc_small(); /* one call site: one entry of 3 */
	alloc_medium();
	alloc_large();

	get(&info, &overall, &info_size, &total, &bt);
	say("overall_size=%zu info_size=%zu total_memory=%zu backtrace_size=%zu entries=%zu\n", overall,
	    info_size, total, bt, info_size != 0 ? overall / info_size : 0);
	for (size_t off = 0; info != NULL && info_size != 0 && off + info_size <= overall; off += info_size) {
		size_t e[2];
		uintptr_t first = 0;

		memcpy(e, info + off, sizeof(e));
		if (bt > 0)
			memcpy(&first, info + off + sizeof(e), sizeof(first));
		say("size=%zu num=%zu first_frame=%s\n", e[0], e[1], frame_name(first));
	}
	release(info);
	release(NULL);

	// A NULL argument: an error line from the shim, the other outputs untouched.
	overall = info_size = total = bt = 7;
	info = (uint8_t *)&overall;
	get(&info, &overall, NULL, &total, &bt);
	if (info == (uint8_t *)&overall && overall == 7 && total == 7 && bt == 7)
		say("null_check=ok\n");
	else
		say("null_check=changed\n");

	for (int i = 1; i < argc; i++) {
		int sig = atoi(argv[i]);

		raise(sig);
		free(malloc(10));
		say("raised %d\n", sig);
	}
	return 0;
}
