// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// A program's own operator new and delete, in a library of its own: a bump
// pool. Its delete traps on a block that is not the pool's.
#include <cstddef>
#include <new>

alignas(16) static char pool[1 << 20];
static std::size_t used;

extern "C" int in_pool(const void *p)
{
	return p >= static_cast<const void *>(pool) && p < static_cast<const void *>(pool + sizeof(pool));
}

void *operator new(std::size_t n)
{
	n = (n + 15) & ~std::size_t(15);
	if (used + n > sizeof(pool))
		throw std::bad_alloc();
	void *p = pool + used;
	used += n;
	return p;
}

void operator delete(void *p) noexcept
{
	if (p != nullptr && !in_pool(p))
		__builtin_trap();
}

void operator delete(void *p, std::size_t) noexcept
{
	operator delete(p);
}
