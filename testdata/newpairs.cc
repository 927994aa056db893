// newpairs times C++ new/delete pairs of 32 to 95 bytes, as pairs times
// malloc/free pairs, and prints "pairs N NS_PER_PAIR" in the same format.
//
//   newpairs [N]
#include <cstdio>
#include <cstdlib>
#include <ctime>

static double now()
{
	timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	// Warm up: the first calls map the allocator's memory.
	for (int i = 0; i < 64; i++)
		delete[] new char[32];
	double t0 = now();
	for (long i = 0; i < n; i++) {
		char *volatile p = new char[32 + (i & 63)];
		delete[] p;
		char *volatile q = new char;
		delete q;
	}
	double t1 = now();
	printf("pairs %ld %.1f\n", n, (t1 - t0) / n / 2);
	return 0;
}
