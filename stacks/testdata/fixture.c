// fixture is the program the stacks tests symbolize. It prints the
// addresses of its own functions and of a function in libfixlib.so, one
// "NAME 0xADDRESS" line each, then "ready", and waits until its standard
// input is closed.
#include <stdio.h>

extern void *fixlib_func_addr(void);
extern void nosize_func(void);

__attribute__((noinline, noclone)) static int local_func(int x) {
  int sum = 0;
  for (int i = 0; i < x; i++) {
    sum += i * x;
  }
  return sum;
}

__attribute__((noinline, noclone)) int exported_func(int x) {
  int sum = 1;
  for (int i = 0; i < x; i++) {
    sum *= 3;
  }
  return sum + local_func(x);
}

int main(void) {
  int (*volatile lib)(int) = (int (*)(int))fixlib_func_addr();
  printf("local_func %p\n", (void *)local_func);
  printf("exported_func %p\n", (void *)exported_func);
  printf("nosize_func %p\n", (void *)nosize_func);
  printf("fixlib_func %p\n", (void *)lib);
  printf("result %d\n", exported_func(3) + lib(4));
  printf("ready\n");
  fflush(stdout);
  while (getchar() != EOF) {
  }
  return 0;
}

// nosize_func is a global function whose symbol has no size (size 0). It
// comes last in .text so that no other function falls under it.
__asm__(".text\n"
        ".globl nosize_func\n"
        ".type nosize_func, @function\n"
        "nosize_func:\n"
        "\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n"
        "\tret\n");
