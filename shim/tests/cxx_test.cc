// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// C++ allocations through libmdshim.so: new/delete, arrays, over-aligned
// types, containers. "corrupt" writes before a new[] block so that
// delete[] reports a corrupted front guard.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct alignas(64) Wide {
	char data[100];
};

static int failures;

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
