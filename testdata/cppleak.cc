// cppleak leaks through C++: malloc inside a template member function of a
// namespace, operator new[] and its nothrow form. Before that it calls every form of operator
// new and delete 100 times each, and frees all it gets: 800 blocks.
//
//   cppleak [hold]
//
// With "hold" it writes "ready" and waits for a line on standard input
// before it starts, so that mdtrace can attach to it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unistd.h>

namespace geo {
template <class T> struct Arena {
	__attribute__((noinline)) T *raw(unsigned long n) { return static_cast<T *>(std::malloc(n * sizeof(T))); }
	__attribute__((noinline)) T *fresh(unsigned long n) { return new T[n]; }
	__attribute__((noinline)) T *spare(unsigned long n) { return new (std::nothrow) T[n]; }
};
} // namespace geo

struct alignas(64) Line {
	char b[64];
};

static char *volatile kept[3];

// Each form of new, then the delete that goes with it.
__attribute__((noinline)) static void churn()
{
	for (int i = 0; i < 100; i++) {
		delete new long(i);                              // new(size), sized delete
		delete[] new char[i + 1];                        // new[](size), delete[](ptr)
		operator delete(operator new(24));               // new(size), delete(ptr)
		delete new (std::nothrow) int(i);                // new(size, nothrow)
		delete new Line;                                 // new(size, align), delete(ptr, size, align)
		delete[] new Line[2];                            // new[](size, align), delete[](ptr, align)
		operator delete[](operator new[](40, std::nothrow), std::nothrow);
		operator delete(operator new(48, std::align_val_t(32), std::nothrow), std::align_val_t(32), std::nothrow);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && std::strcmp(argv[1], "hold") == 0) {
		char line[16];
		write(1, "ready\n", 6);
		if (read(0, line, sizeof(line)) < 0)
			return 1;
	}
	churn();
	geo::Arena<char> arena;
	kept[0] = arena.raw(777);
	kept[1] = arena.fresh(555);
	kept[2] = arena.spare(333);
	write(1, "cppleak: done\n", 14);
	return 0;
}
