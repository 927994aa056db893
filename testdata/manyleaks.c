// manyleaks leaks N small blocks (1,000,000 if not given) and exits: the
// workload of a leak report or heap dump of millions of blocks. The blocks
// come from four functions, each at its own depth, and have sizes of 16
// to 76 bytes, so that the report's order (by size, then backtrace length,
// then address) has work to do and its backtraces are few. Its last act is
// to write the time it exits at (CLOCK_REALTIME, in seconds) on standard
// error, "exit S.NNNNNNNNN", so that the time an exit report takes can be
// measured.
//
//   manyleaks [N]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile sink;

NOINLINE void leak_one(size_t size) { sink = malloc(size); }
NOINLINE void leak_two(size_t size) { leak_one(size); }
NOINLINE void leak_three(size_t size) { leak_two(size); }
NOINLINE void leak_four(size_t size) { leak_three(size); }

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;

	for (long i = 0; i < n; i++) {
		size_t size = 16 + (size_t)(i * 7 % 61);
		switch (i % 4) {
		case 0:
			leak_one(size);
			break;
		case 1:
			leak_two(size);
			break;
		case 2:
			leak_three(size);
			break;
		default:
			leak_four(size);
		}
	}
	struct timespec now;
	char line[64];
	clock_gettime(CLOCK_REALTIME, &now);
	// snprintf allocates nothing, unlike stdio's streams.
	int len = snprintf(line, sizeof line, "exit %lld.%09ld\n", (long long)now.tv_sec, now.tv_nsec);
	write(2, line, (size_t)len);
	return 0;
}
