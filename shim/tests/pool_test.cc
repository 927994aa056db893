// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// pool_test allocates with new and new[] where libnewpool.so replaces
// operator new and delete: the blocks must come from its pool, whatever the
// shim preloaded before it defines, and go back to it.
#include <cstdio>

extern "C" int in_pool(const void *p);

int main()
{
	int *one = new int(1);
	char *many = new char[10];
	std::fprintf(stderr, "new: %s, new[]: %s\n", in_pool(one) ? "pool" : "heap", in_pool(many) ? "pool" : "heap");
	delete one;
	delete[] many;
	std::fprintf(stderr, "pool done\n");
	return 0;
}
