// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A workload for run.sh built without -rdynamic, so that .dynsym holds none
 * of its functions and only .symtab names them: it corrupts a front guard
 * from a static function of the program ("exe"), of libsymtest.so ("lib"),
 * or of the program after deleting its own file ("deleted"). It prints the
 * block as P=POINTER when the block is freed, like md_test.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int symlib_corrupt(int n);

static void *volatile sink;

static __attribute__((noinline)) int corrupt_in_exe(int n)
{
	unsigned char *p = malloc(100);

	sink = p;
	p = sink;
	printf("P=%p\n", (void *)p);
	fflush(stdout);
	p[-1] = 0x00;
	free(p);
	return n + 1;
}

static __attribute__((noinline)) int call_lib(int n)
{
	return symlib_corrupt(n) + 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "exe") == 0)
		return corrupt_in_exe(0) - 1;
	if (argc == 2 && strcmp(argv[1], "lib") == 0)
		return call_lib(0) - 3;
	if (argc == 2 && strcmp(argv[1], "deleted") == 0) {
		if (unlink(argv[0]) != 0) {
			fprintf(stderr, "FAIL: unlink %s\n", argv[0]);
			return 1;
		}
		return corrupt_in_exe(0) - 1;
	}
	fprintf(stderr, "usage: %s exe|lib|deleted\n", argv[0]);
	return 2;
}
