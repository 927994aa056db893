// libdlnofp is the library dlnofp loads: its constructor and dlnofp_run
// each leak a block from the bottom of a chain of three functions.
#include <stdlib.h>

static void *volatile kept[2];

#define LINK(name, next)                                                 \
	__attribute__((noinline)) void name(int size, int slot)          \
	{                                                                \
		next(size, slot);                                        \
		/* Not a tail call: the frame stays on the stack. */     \
		__asm__ volatile("" : : : "memory");                     \
	}

__attribute__((noinline)) void dlnofp_leaf(int size, int slot)
{
	kept[slot] = malloc(size);
	__asm__ volatile("" : : : "memory");
}

LINK(dlnofp_mid, dlnofp_leaf)
LINK(dlnofp_top, dlnofp_mid)

__attribute__((constructor)) static void dlnofp_init(void)
{
	dlnofp_top(3001, 0);
	__asm__ volatile("" : : : "memory");
}

void dlnofp_run(int size)
{
	dlnofp_top(size, 1);
	__asm__ volatile("" : : : "memory");
}
