// exact makes calls whose outcome under mdtrace must be the native one,
// built as distributions build code (-O2, no frame pointers).
//
//   exact wild        frees two pointers no allocator gave out
//                     (0xdead0000, unmapped, and 0x87654321), then
//                     prints "wild done" and exits 0
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void wild_free(uintptr_t addr)
{
	free((void *)addr);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	if (strcmp(argv[1], "wild") == 0) {
		wild_free(0xdead0000);
		wild_free(0x87654321);
		puts("wild done");
		return 0;
	}
	return 2;
}
