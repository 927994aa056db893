// libslowload's constructor runs with the loader's lock held: it says
// "loading" and waits for a line on standard input (see slowload.c).
#include <unistd.h>

__attribute__((constructor)) static void wait_line(void)
{
	char c;

	write(1, "loading\n", 8);
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}
