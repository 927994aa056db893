// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A shared library for the symbolizer tests (symbols_prog.c under the shim,
 * symbols_test.c directly): static functions, which only .symtab names, an
 * exported one, which .dynsym names too, and, on x86, a function of size 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Keep the compiler from reasoning about the out-of-bounds write. */
static void *volatile lib_sink;

static __attribute__((noinline)) int lib_corrupt(int n)
{
	unsigned char *p = malloc(100);

	lib_sink = p;
	p = lib_sink;
	printf("P=%p\n", (void *)p);
	fflush(stdout);
	p[-1] = 0x00;
	free(p);
	return n + 1;
}

/* symlib_corrupt corrupts a front guard from a static function of the library. */
int symlib_corrupt(int n)
{
	return lib_corrupt(n) + 1;
}

static __attribute__((noinline)) uintptr_t lib_static_helper(uintptr_t x)
{
	return x * 3 + (uintptr_t)lib_sink;
}

#if defined(__x86_64__) || defined(__i386__)
/* A function without a .size, as hand-written assembly often is: it ends at the next symbol. */
__asm__(".text\n"
	".type lib_nosize, @function\n"
	"lib_nosize:\n"
	"\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n"
	"\tret\n");
extern void lib_nosize(void) __asm__("lib_nosize") __attribute__((visibility("hidden")));
#endif

/* symlib_addrs stores the addresses of the library's static functions; returns their count. */
int symlib_addrs(uintptr_t *helper, uintptr_t *corrupt, uintptr_t *nosize)
{
	*helper = (uintptr_t)lib_static_helper;
	*corrupt = (uintptr_t)lib_corrupt;
#if defined(__x86_64__) || defined(__i386__)
	*nosize = (uintptr_t)lib_nosize;
#else
	*nosize = 0;
#endif
	return (int)lib_static_helper(0) & 0;
}
