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
#include <signal.h>

#include "leakinfo.h"

typedef void get_fn(uint8_t **info, size_t *overall_size, size_t *info_size, size_t *total_memory,
		    size_t *backtrace_size);
typedef void free_fn(uint8_t *info);

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
	alloc_all();
	get(&info, &overall, &info_size, &total, &bt);
	print_leak_info(info, overall, info_size, total, bt, "");
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
