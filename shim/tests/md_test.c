// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Workloads for the libmdshim.so tests, one per subcommand, run by run.sh
 * under LD_PRELOAD with the matching LIBC_DEBUG_MALLOC_OPTIONS.
 *
 * A workload prints "NAME=POINTER" lines on stdout so that run.sh can put
 * the names in place of the pointers in the library's messages, and
 * "FAIL: ..." on stderr for any expectation of its own that does not hold.
 * Built with frame pointers and -rdynamic so backtraces name its functions.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The workloads use freed blocks on purpose: free_track keeps them mapped. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wuse-after-free"
#endif

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

/* Keep the compiler from reasoning about freed or out-of-bounds memory. */
static void *volatile sink;
static void *opaque(void *p)
{
	sink = p;
	return sink;
}

/* An opaque size, so the compiler does not reject the huge requests. */
static size_t sz(size_t v)
{
	volatile size_t x = v;

	return x;
}

static void name_ptr(const char *name, void *p)
{
	printf("%s=%p\n", name, p);
	fflush(stdout);
}

static int all_bytes(const void *p, int value, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i] != (uint8_t)value)
			return 0;
	return 1;
}

int test_front_guard_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	p[-32] = 0x00;
	p[-15] = 0x02;
	free(p);
	return 0;
}

int test_rear_guard_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	CHECK(malloc_usable_size(p) == 100);
	p[130] = 0xbf;
	p[131] = 0x00;
	free(p);
	return 0;
}

int test_rear_guard_shrink(void)
{
	uint8_t *p = opaque(malloc(200));
	uint8_t *q;

	memset(p, 0, 200);
	q = opaque(realloc(p, 100));
	CHECK(q == p);
	CHECK(malloc_usable_size(q) == 100);
	name_ptr("P", q);
	q[130] = 0xbf;
	q[131] = 0x00;
	free(q);
	return 0;
}

int test_both_guards_corrupted(void)
{
	uint8_t *p = opaque(malloc(10));

	name_ptr("P", p);
	p[-1] = 0x01;
	p[10] = 0x02;
	p[41] = 0x03;
	free(p);
	return 0;
}

int test_tag_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));
	uint8_t saved;

	name_ptr("P", p);
	saved = p[-32];
	p[-32] = 0x00;
	CHECK(malloc_usable_size(p) == 0);
	CHECK(realloc(p, 200) == NULL);
	free(p);
	p[-32] = saved;
	CHECK(malloc_usable_size(p) == 100);
	free(p);
	return 0;
}

int test_guard_realloc(void)
{
	uint8_t *p = opaque(malloc(40)), *q;

	for (int i = 0; i < 40; i++)
		p[i] = (uint8_t)i;
	q = opaque(realloc(p, 40));
	/* With expand_alloc the compared size includes the expansion, as on Android. */
	CHECK(q == p || strstr(getenv("LIBC_DEBUG_MALLOC_OPTIONS"), "expand_alloc") != NULL);
	q = opaque(realloc(q, 4000));
	for (int i = 0; i < 40; i++)
		CHECK(q[i] == (uint8_t)i);
	q = opaque(realloc(q, 10));
	for (int i = 0; i < 10; i++)
		CHECK(q[i] == (uint8_t)i);
	CHECK(realloc(q, 0) == NULL);
	q = opaque(reallocarray(NULL, 10, 10));
	CHECK(q != NULL);
	errno = 0;
	CHECK(reallocarray(q, sz(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM);
	free(q);
	return 0;
}

/* Sizes beyond 0x7fffffff and overflowing requests fail with ENOMEM. */
int test_huge(void)
{
	void *p;

	errno = 0;
	CHECK(malloc((size_t)1 << 31) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(malloc(sz(SIZE_MAX)) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(calloc(1, (size_t)1 << 31) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(calloc(sz(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(memalign(16, (size_t)1 << 31) == NULL && errno == ENOMEM);
	CHECK(posix_memalign(&p, 16, SIZE_MAX) == ENOMEM);
	CHECK(posix_memalign(&p, 11, 100) == EINVAL);
	p = opaque(malloc(100));
	memset(p, 0x5a, 100);
	errno = 0;
	CHECK(realloc(p, sz(SIZE_MAX)) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(realloc(p, (size_t)1 << 31) == NULL && errno == ENOMEM);
	CHECK(all_bytes(p, 0x5a, 100));
	free(p);
	return 0;
}

int test_fill_on_alloc(void)
{
	for (size_t size = 1; size < 2000; size += 37) {
		uint8_t *p = opaque(malloc(size)), *q;
		size_t usable = malloc_usable_size(p);

		CHECK(usable >= size && all_bytes(p, 0xeb, usable));
		memset(p, 0x11, usable);
		q = opaque(realloc(p, size * 3));
		CHECK(all_bytes(q, 0x11, usable));
		CHECK(all_bytes(q + usable, 0xeb, malloc_usable_size(q) - usable));
		free(q);
		p = opaque(calloc(1, size));
		CHECK(all_bytes(p, 0, size));
		free(p);
		p = opaque(memalign(64, size));
		CHECK(all_bytes(p, 0xeb, malloc_usable_size(p)));
		free(p);
		p = opaque(realloc(NULL, size));
		CHECK(all_bytes(p, 0xeb, malloc_usable_size(p)));
		free(p);
	}
	return 0;
}

int test_fill_on_alloc_partial(void)
{
	uint8_t *p = opaque(malloc(100));

	CHECK(all_bytes(p, 0xeb, 25));
	CHECK(p[25] != 0xeb || p[26] != 0xeb || p[27] != 0xeb || p[28] != 0xeb);
	free(p);
	return 0;
}

/* With free_track the block stays mapped, so its free fill can be read. */
int test_fill_on_free(void)
{
	uint8_t *p = opaque(malloc(100));
	size_t usable = malloc_usable_size(p);

	memset(p, 0, usable);
	free(p);
	CHECK(all_bytes(p, 0xef, usable));
	return 0;
}

int test_fill_on_free_partial(void)
{
	uint8_t *p = opaque(malloc(100));

	memset(p, 0, 100);
	free(p);
	CHECK(all_bytes(p, 0xef, 30));
	CHECK(all_bytes(p + 30, 0, 70));
	return 0;
}

int test_expand_alloc(void)
{
	void *p = opaque(malloc(10)), *q;

	CHECK(malloc_usable_size(p) >= 10 + 1024);
	q = opaque(realloc(p, 2000));
	CHECK(malloc_usable_size(q) >= 2000 + 1024);
	free(q);
	p = opaque(calloc(10, 10));
	CHECK(malloc_usable_size(p) >= 100 + 1024);
	free(p);
	p = opaque(memalign(128, 10));
	CHECK(malloc_usable_size(p) >= 10 + 1024 && ((uintptr_t)p & 127) == 0);
	free(p);
	p = opaque(aligned_alloc(64, 128));
	CHECK(malloc_usable_size(p) >= 128 + 1024);
	free(p);
	return 0;
}

int test_free_track_use_after_free(void)
{
	uint8_t *pointers[5], *large1, *large2;
	char name[8];

	for (int i = 0; i < 5; i++) {
		pointers[i] = opaque(malloc(100 + (size_t)i));
		snprintf(name, sizeof(name), "P%d", i);
		name_ptr(name, pointers[i]);
		memset(pointers[i], 0, 100 + (size_t)i);
		free(pointers[i]);
	}
	pointers[0][20] = 0xaf;
	pointers[0][99] = 0x12;
	pointers[3][3] = 0x34;

	large1 = opaque(malloc(8192));
	name_ptr("L1", large1);
	memset(large1, 0, 8192);
	free(large1);
	large1[4095] = 0x90;
	large1[4100] = 0x56;
	large1[8191] = 0x00;

	large2 = opaque(malloc(9000));
	name_ptr("L2", large2);
	memset(large2, 0, 9000);
	free(large2);
	large2[8200] = 0x78;

	for (int i = 0; i < 10; i++)
		free(opaque(malloc(100 + (size_t)i)));
	fprintf(stderr, "done\n");
	return 0;
}

int test_free_track_finalize(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	p[10] = 0x01;
	p[50] = 0x02;
	fprintf(stderr, "exiting\n");
	return 0;
}

int test_free_track_double_free(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	free(p);
	return 0;
}

int test_free_track_realloc_freed(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	CHECK(realloc(p, 200) == NULL);
	return 0;
}

int test_free_track_header_tag_corrupted(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	free(p);
	p[-32] = 0x00;
	return 0;
}

int test_free_track_modified_partial(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	free(p);
	memset(p, 0, 100);
	for (int i = 0; i < 4; i++)
		free(opaque(malloc(100)));
	return 0;
}

int test_abort(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	p[-1] = 0;
	free(p);
	fprintf(stderr, "FAIL: still running\n");
	return 0;
}

static int check_aligned(void *p, size_t align)
{
	return p != NULL && ((uintptr_t)p & (align - 1)) == 0;
}

int test_alignment(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	static const size_t aligns[] = { 1, 2, 8, 16, 24, 32, 64, 100, 256, 4096, 8192 };

	for (size_t size = 0; size < 300; size++) {
		void *p = opaque(malloc(size)), *q;

		CHECK(check_aligned(p, 16));
		q = opaque(calloc(1, size));
		CHECK(check_aligned(q, 16));
		p = opaque(realloc(p, size * 2 + 1));
		CHECK(check_aligned(p, 16));
		free(p);
		free(q);
	}
	for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
		size_t a = aligns[i], want = 1;
		void *p;

		while (want < a)
			want <<= 1;
		if (want < 16)
			want = 16;
		for (size_t size = 1; size < 5000; size += 999) {
			p = opaque(memalign(a, size));
			CHECK(check_aligned(p, want));
			free(p);
		}
	}
	for (size_t a = 8; a <= 4096; a *= 2) {
		void *p = NULL;

		CHECK(posix_memalign(&p, a, 100) == 0 && check_aligned(p, a < 16 ? 16 : a));
		free(p);
		p = opaque(aligned_alloc(a, a * 3));
		CHECK(check_aligned(p, a < 16 ? 16 : a));
		free(p);
	}
	void *v = opaque(valloc(10));
	CHECK(check_aligned(v, page));
	free(v);
	v = opaque(pvalloc(10));
	CHECK(check_aligned(v, page) && malloc_usable_size(v) >= 10);
	free(v);
	return 0;
}

/* Many threads allocate, check and free; no report is expected. */
static void *stress_thread(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	uint8_t *slots[64] = { 0 };
	size_t sizes[64] = { 0 };

	for (int iter = 0; iter < 20000; iter++) {
		int i = rand_r(&seed) % 64;
		size_t size = (size_t)(rand_r(&seed) % 3000);

		if (slots[i] != NULL) {
			for (size_t j = 0; j < sizes[i]; j++)
				if (slots[i][j] != (uint8_t)(i + j)) {
					fprintf(stderr, "FAIL: stress data corrupted\n");
					failures++;
					break;
				}
			if (rand_r(&seed) % 4 == 0) {
				uint8_t *q = realloc(slots[i], size + 1);

				if (q == NULL) {
					failures++;
					continue;
				}
				slots[i] = q;
				for (size_t j = 0; j < size + 1; j++)
					q[j] = (uint8_t)(i + j);
				sizes[i] = size + 1;
				continue;
			}
			free(slots[i]);
			slots[i] = NULL;
		}
		switch (rand_r(&seed) % 4) {
		case 0:
			slots[i] = malloc(size);
			break;
		case 1:
			slots[i] = calloc(1, size);
			break;
		case 2:
			slots[i] = memalign(64, size);
			break;
		default:
			slots[i] = realloc(NULL, size);
			break;
		}
		sizes[i] = size;
		for (size_t j = 0; j < size; j++)
			slots[i][j] = (uint8_t)(i + j);
	}
	for (int i = 0; i < 64; i++)
		free(slots[i]);
	return NULL;
}

int test_threads(void)
{
	pthread_t t[8];

	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, stress_thread, (void *)(uintptr_t)(i + 1)) == 0);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	fprintf(stderr, "threads done\n");
	return 0;
}

static volatile int stop_loop;

static void *loop_thread(void *arg)
{
	(void)arg;
	while (!stop_loop) {
		void *p = malloc(64);

		free(p);
		p = calloc(3, 100);
		free(p);
	}
	return NULL;
}

/* A thread keeps the allocator busy while the main thread forks; children must not hang. */
int test_fork(void)
{
	pthread_t t;
	int hung = 0;

	CHECK(pthread_create(&t, NULL, loop_thread, NULL) == 0);
	for (int i = 0; i < 50; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			for (int j = 0; j < 100; j++)
				free(malloc((size_t)j * 10));
			_exit(0);
		}
		CHECK(pid > 0);
		int status = -1, waited = 0;
		while (waitpid(pid, &status, WNOHANG) == 0) {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
			if (++waited > 10000) {
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				hung++;
				break;
			}
		}
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	stop_loop = 1;
	pthread_join(t, NULL);
	CHECK(hung == 0);
	fprintf(stderr, "forks done\n");
	return 0;
}

int test_plain(void)
{
	void *p = opaque(malloc(100));

	memset(p, 1, 100);
	p = opaque(realloc(p, 1000));
	free(p);
	fprintf(stderr, "ran\n");
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(void);
} tests[] = {
	{ "front_guard_corrupted", test_front_guard_corrupted },
	{ "rear_guard_corrupted", test_rear_guard_corrupted },
	{ "rear_guard_shrink", test_rear_guard_shrink },
	{ "both_guards_corrupted", test_both_guards_corrupted },
	{ "tag_corrupted", test_tag_corrupted },
	{ "guard_realloc", test_guard_realloc },
	{ "huge", test_huge },
	{ "fill_on_alloc", test_fill_on_alloc },
	{ "fill_on_alloc_partial", test_fill_on_alloc_partial },
	{ "fill_on_free", test_fill_on_free },
	{ "fill_on_free_partial", test_fill_on_free_partial },
	{ "expand_alloc", test_expand_alloc },
	{ "free_track_use_after_free", test_free_track_use_after_free },
	{ "free_track_finalize", test_free_track_finalize },
	{ "free_track_double_free", test_free_track_double_free },
	{ "free_track_realloc_freed", test_free_track_realloc_freed },
	{ "free_track_header_tag_corrupted", test_free_track_header_tag_corrupted },
	{ "free_track_modified_partial", test_free_track_modified_partial },
	{ "abort", test_abort },
	{ "alignment", test_alignment },
	{ "threads", test_threads },
	{ "fork", test_fork },
	{ "plain", test_plain },
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s TEST\n", argv[0]);
		return 2;
	}
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (strcmp(argv[1], tests[i].name) == 0) {
			tests[i].fn();
			return failures == 0 ? 0 : 1;
		}
	}
	fprintf(stderr, "unknown test %s\n", argv[1]);
	return 2;
}
