// sampled leaks known numbers of blocks of three sizes from three functions,
// and mallocs and frees as many small blocks again: the workload of
// mdtrace --sample-bytes, whose estimates must find the leaks' counts.
// It uses no stdio, which would allocate. With SAMPLED_WAIT set in its
// environment it says "ready" and waits for a line on standard input
// first, for mdtrace -p to attach meanwhile. With SAMPLED_SECCOMP set it
// first puts itself under a seccomp filter that allows every system call:
// an mdtrace --all --inject running beside a test (go test runs packages at
// once) then leaves it alone, where it would take its calls at the 8192nd.
//
//   sampled   20000 blocks of 64 bytes from leak_small, 2000 of 4096 from
//             leak_large, 2000 of 2048 from leak_grown, each grown by
//             realloc from 16 and 256 bytes; 20000 of 64 bytes freed at once
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void *volatile sink;

NOINLINE void leak_small(void) { sink = malloc(64); }
NOINLINE void leak_large(void) { sink = malloc(4096); }

NOINLINE void leak_grown(void)
{
	void *p = malloc(16);

	p = realloc(p, 256);
	sink = realloc(p, 2048);
}

int main(void)
{
	if (getenv("SAMPLED_SECCOMP") != NULL) {
		struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		struct sock_fprog prog = {1, &allow};

		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
			return 1;
	}
	if (getenv("SAMPLED_WAIT") != NULL) {
		char c;

		write(1, "ready\n", 6);
		while (read(0, &c, 1) == 1 && c != '\n')
			;
	}
	for (int i = 0; i < 20000; i++) {
		leak_small();
		free(malloc(64));
	}
	for (int i = 0; i < 2000; i++)
		leak_large();
	for (int i = 0; i < 2000; i++)
		leak_grown();
	return 0;
}
