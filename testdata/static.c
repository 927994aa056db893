// static is linked statically: no dynamic loader, so nothing preloaded.
// It writes a byte past a block of 64, frees it and leaks one of 5555.
#include <stdio.h>
#include <stdlib.h>

void *volatile kept;

int main(void)
{
	volatile char *p = malloc(64);
	volatile int past = 64;

	p[past] = 1;
	free((void *)p);
	kept = malloc(5555);
	puts("static done");
	return 0;
}
