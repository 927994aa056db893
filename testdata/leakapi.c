// leakapi calls get_malloc_leak_info as a program does that includes
// <mdtrace/malloc_debug.h> and links libmdtrace (the tests build it against
// the built or installed library, shared or static), and prints what it
// gets:
//
//   overall_size=N info_size=N total_memory=N backtrace_size=N entries=N
//   size=N num=N first_frame=NAME      (one line per entry, in buffer order)
//
// NAME is dladdr's name for the entry's first frame, or "?" (build it with
// -rdynamic). The blocks it keeps live: 3 x 100 bytes from one call of
// alloc_small, 1 x 200 from alloc_medium and 1 x 9000 from alloc_large.
// It writes with write(2) only, so that stdio allocates nothing.
#define _GNU_SOURCE
#include <mdtrace/malloc_debug.h>

#include "leakinfo.h"

int main(void)
{
	size_t overall = 7, info_size = 7, total = 7, bt = 7;
	uint8_t *info = (uint8_t *)&overall;

	alloc_all();
	get_malloc_leak_info(&info, &overall, &info_size, &total, &bt);
	print_leak_info(info, overall, info_size, total, bt, info == NULL ? " info=NULL" : "");
	free_malloc_leak_info(info);
	return 0;
}
