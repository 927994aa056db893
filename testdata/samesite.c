// samesite allocates N blocks of 48 bytes at one call site
// (samesite_make) and frees every other one as it goes, the one before the
// newest, and keeps the rest, N/2 blocks, live at exit, every one with the
// same backtrace. In the shim's batches a batch's first allocation
// carries the frames and the later ones from the site name them; where
// that first one is freed while later events follow it, the shim takes it
// back and keeps its frames for the allocations that name them. It prints
// "samesite N".
//
//   samesite N
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

/* Where the blocks kept stay reachable, as a program's would. */
static void **kept;

NOINLINE void *samesite_make(void)
{
	void *p = malloc(48);

	/* Not a tail call: the frame stays on the stack. */
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0, nkept = 0;
	void *prev = NULL;

	if (n <= 0 || n % 2 != 0) {
		fprintf(stderr, "usage: samesite N (even, above 0)\n");
		return 2;
	}
	kept = calloc((size_t)n / 2, sizeof(*kept));
	if (kept == NULL)
		return 1;
	for (int i = 0; i < n; i++) {
		void *p = samesite_make();

		if (i % 2 == 0) {
			prev = p;
		} else {
			kept[nkept++] = p;
			free(prev);
		}
	}
	printf("samesite %d\n", n);
	return 0;
}
