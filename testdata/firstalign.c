// firstalign's first allocation is an aligned_alloc, in a constructor,
// before anything has called malloc: glibc 2.36's memalign then takes its
// path that initializes malloc, which a probe on its usual path misses.
// It leaks the block, 1234 bytes.
#include <stdlib.h>

static void *volatile sink;

__attribute__((constructor(101))) static void first_aligned_alloc(void)
{
	sink = aligned_alloc(64, 1234);
}

int main(void)
{
	return 0;
}
