// arena is the C++ program the stacks tests symbolize: a member function of
// a class template in a namespace, whose mangled name is
// _ZN3geo5ArenaIcE3rawEm. It prints "raw 0xADDRESS" and "ready", and waits
// until its standard input is closed.
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace geo {
template <class T> struct Arena {
  __attribute__((noinline)) T *raw(unsigned long n);
};

template <class T> T *Arena<T>::raw(unsigned long n) {
  return static_cast<T *>(malloc(n * sizeof(T)));
}

template struct Arena<char>;
} // namespace geo

int main() {
  char *(geo::Arena<char>::*method)(unsigned long) = &geo::Arena<char>::raw;
  void *addr;
  // A pointer to a non-virtual member function starts with the function's
  // address in the Itanium C++ ABI.
  memcpy(&addr, &method, sizeof addr);
  geo::Arena<char> arena;
  free(arena.raw(16));
  printf("raw %p\n", addr);
  printf("ready\n");
  fflush(stdout);
  while (getchar() != EOF) {
  }
  return 0;
}
