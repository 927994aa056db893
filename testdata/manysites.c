// manysites leaks N blocks (140000 if not given), each of a size and a
// backtrace no other block has both of: sizes 1 to 1024 bytes, from 256
// call paths (eight levels of left or right), so that a heap dump of it
// has a record a block. The blocks add up to about N/2 KB.
//
//   manysites [N]
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static void **blocks;

NOINLINE static void leaf(unsigned i) { blocks[i] = malloc(1 + (i & 1023)); }

NOINLINE static void step(int level, unsigned i);
NOINLINE static void left(int level, unsigned i) { step(level - 1, i); }
NOINLINE static void right(int level, unsigned i) { step(level - 1, i); }

// step goes down eight levels, to the left or the right at each by a bit
// of i above its size's ten.
NOINLINE static void step(int level, unsigned i)
{
	if (level == 0)
		leaf(i);
	else if ((i >> (9 + level)) & 1)
		right(level, i);
	else
		left(level, i);
}

int main(int argc, char **argv)
{
	unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 140000;
	if (n > 256 * 1024)
		return 2;
	blocks = calloc(n, sizeof(void *));
	for (unsigned i = 0; i < n; i++)
		step(8, i);
	return 0;
}
