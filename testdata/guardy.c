// guardy writes past the end of a 100-byte block (into the rear guard the
// shim puts there), frees it, and leaks a 1234-byte block.
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static void *volatile kept;

NOINLINE void overflow(void)
{
	unsigned char *p = malloc(100);
	p[130] = 0xbf;
	p[131] = 0;
	free(p);
}

NOINLINE void leak_with_guard(void) { kept = malloc(1234); }

int main(void)
{
	overflow();
	leak_with_guard();
	return 0;
}
