// fixlib is the shared library the stacks fixture calls into.

__attribute__((noinline, noclone)) int fixlib_func(int x) {
  int sum = 7;
  for (int i = 0; i < x; i++) {
    sum += sum / 3 + i;
  }
  return sum;
}

// fixlib_func_addr returns the address of fixlib_func inside this library,
// so that the program need not take it itself (which in a non-PIE program
// would yield the address of a PLT entry in the program).
void *fixlib_func_addr(void) { return (void *)fixlib_func; }
