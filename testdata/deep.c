// deep leaks one block from the bottom of a recursion of known depth, and
// mallocs and frees COUNT more blocks there: its backtraces are as long as
// the depth asks.
//
//   deep DEPTH COUNT
#include <stdlib.h>

static void *volatile sink;

__attribute__((noinline)) static void bottom(int count)
{
	sink = malloc(4242);
	for (int i = 0; i < count; i++)
		free(malloc(64));
}

__attribute__((noinline)) static void recurse(int depth, int count)
{
	if (depth == 0) {
		bottom(count);
		return;
	}
	recurse(depth - 1, count);
	// Not a tail call: the frame stays on the stack.
	sink = sink;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	recurse(atoi(argv[1]), atoi(argv[2]));
	return 0;
}
