// cppleak leaks through C++: malloc inside a template member function of a
// namespace, and operator new.
#include <cstdlib>
#include <unistd.h>

namespace geo {
template <class T> struct Arena {
	__attribute__((noinline)) T *raw(unsigned long n) { return static_cast<T *>(std::malloc(n * sizeof(T))); }
	__attribute__((noinline)) T *fresh(unsigned long n) { return new T[n]; }
};
} // namespace geo

static char *volatile kept[2];

int main()
{
	geo::Arena<char> arena;
	kept[0] = arena.raw(777);
	kept[1] = arena.fresh(555);
	write(1, "cppleak: done\n", 14);
	return 0;
}
