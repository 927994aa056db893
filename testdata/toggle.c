// toggle leaks a block of 1111 bytes, writes "ready" and waits for a line
// on standard input, then leaks a block of 2222 bytes and writes "done":
// backtraces toggled on by signal 45 in between must be off for the first
// block and on for the second, whenever the calls reach mdtrace.
#include <stdlib.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile kept[2];

NOINLINE void leak_before(void) { kept[0] = malloc(1111); }
NOINLINE void leak_after(void) { kept[1] = malloc(2222); }

int main(void)
{
	char c;

	leak_before();
	write(1, "ready\n", 6);
	while (read(0, &c, 1) == 1 && c != '\n')
		;
	leak_after();
	write(1, "done\n", 5);
	return 0;
}
