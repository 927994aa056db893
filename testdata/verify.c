// verify hands bad pointers to the allocator, for verify_pointers.
//
//   verify double     frees a block twice (glibc then aborts)
//   verify interior   frees a pointer inside a block (glibc then aborts)
//   verify usable     asks malloc_usable_size of a freed block, then exits 0
//   verify write      writes into a freed block, and leaks 1234 bytes from
//                     leak_after_free (for free_track), then exits 0
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static char *volatile p;
static volatile int inside = 16;

NOINLINE void first_free(void) { free(p); }
NOINLINE void second_free(void) { free(p); }
NOINLINE void interior_free(void) { free(p + inside); }
NOINLINE size_t usable_after_free(void) { return malloc_usable_size(p); }
NOINLINE void write_after_free(void) { p[3] = 1; }
NOINLINE void leak_after_free(void) { p = malloc(1234); }

int main(int argc, char **argv)
{
	p = malloc(100);
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "double") == 0) {
		first_free();
		second_free();
	} else if (strcmp(argv[1], "interior") == 0) {
		interior_free();
	} else if (strcmp(argv[1], "usable") == 0) {
		first_free();
		usable_after_free();
	} else if (strcmp(argv[1], "write") == 0) {
		first_free();
		write_after_free();
		leak_after_free();
	}
	return 0;
}
