// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// C++ allocations through libmdshim.so: new/delete, arrays, over-aligned
// types, containers. "corrupt" writes before a new[] block so that
// delete[] reports a corrupted front guard. "fail" asks for more than can be
// had: std::bad_alloc, the new_handler, nothrow forms and new(0).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

struct alignas(64) Wide {
	char data[100];
};

static int failures;
static int handler_calls;
static volatile size_t huge = SIZE_MAX / 2;

// A new_handler that gives up after two calls.
static void handler()
{
	if (++handler_calls == 2)
		std::set_new_handler(nullptr);
}

static int fail()
{
	try {
		void *p = operator new(huge);
		std::fprintf(stderr, "new(huge) = %p\n", p);
	} catch (const std::bad_alloc &) {
		std::fprintf(stderr, "new(huge): bad_alloc\n");
	}
	std::set_new_handler(handler);
	try {
		void *p = operator new[](huge, std::align_val_t(64));
		std::fprintf(stderr, "new[](huge, 64) = %p\n", p);
	} catch (const std::bad_alloc &) {
		std::fprintf(stderr, "new[](huge, 64): new_handler called %d times, then bad_alloc\n", handler_calls);
	}
	void *n = operator new(huge, std::nothrow);
	void *na = operator new[](huge, std::align_val_t(32), std::nothrow);
	std::fprintf(stderr, "nothrow: %s %s\n", n ? "block" : "null", na ? "block" : "null");
	void *a = operator new(0), *b = operator new(0);
	std::fprintf(stderr, "new(0): %s\n", a && b && a != b ? "two blocks" : "wrong");
	operator delete(a);
	operator delete(b, std::size_t(0));
	void *big = operator new(100, std::align_val_t(4096));
	std::fprintf(stderr, "new(100, 4096): %s\n", (reinterpret_cast<uintptr_t>(big) & 4095) == 0 ? "aligned" : "misaligned");
	operator delete(big, std::align_val_t(4096));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && std::strcmp(argv[1], "corrupt") == 0) {
		char *volatile p = new char[100];
		std::printf("P=%p\n", static_cast<void *>(p));
		std::fflush(stdout);
		p[-1] = 0x00;
		delete[] p;
		return 0;
	}
	if (argc == 2 && std::strcmp(argv[1], "fail") == 0)
		return fail();
	for (int i = 0; i < 1000; i++) {
		int *one = new int(i);
		std::vector<int> v(static_cast<size_t>(i));
		std::string s(static_cast<size_t>(i % 200), 'x');
		std::map<int, std::string> m;
		m[i] = s;
		Wide *w = new Wide;
		if ((reinterpret_cast<uintptr_t>(w) & 63) != 0) {
			std::fprintf(stderr, "FAIL: over-aligned new not aligned\n");
			failures++;
		}
		auto u = std::make_unique<double[]>(static_cast<size_t>(i % 50 + 1));
		if (*one != i) failures++;
		delete one;
		delete w;
	}
	std::fprintf(stderr, "cxx done\n");
	return failures == 0 ? 0 : 1;
}
