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

/*
 * A realloc that shrinks a block by fewer bytes than expand_alloc adds, with
 * a rear guard, moves it: the contents come along, and the new block's rear
 * guard stays whole (a copy of the old block's whole size ran into it).
 */
int test_guard_realloc_shrink(void)
{
	uint8_t *p = opaque(malloc(6514)), *q;

	for (int i = 0; i < 6514; i++)
		p[i] = (uint8_t)i;
	q = opaque(realloc(p, 6510));
	for (int i = 0; i < 6510; i++)
		CHECK(q[i] == (uint8_t)i);
	memset(q, 1, 6510);
	free(q);
	return 0;
}

/*
 * Blocks of many sizes: malloc_usable_size covers the request, calloc's
 * blocks are zero, and writing a whole block disturbs nothing. Run with
 * another allocator preloaded after the shim, whose malloc_usable_size
 * knows nothing of the shim's blocks.
 */
int test_usable_calloc(void)
{
	for (size_t n = 1; n < 2000; n += 37) {
		uint8_t *p = opaque(malloc(n)), *q = opaque(calloc(1, n));

		CHECK(p != NULL && q != NULL && malloc_usable_size(p) >= n && malloc_usable_size(q) >= n);
		for (size_t i = 0; i < n; i++)
			CHECK(q[i] == 0);
		memset(p, 0x5a, n);
		memset(q, 0x77, n);
		free(p);
		free(q);
	}
	return 0;
}

/* A calloc'd block written one byte past its end. */
int test_calloc_overrun(void)
{
	uint8_t *q = opaque(calloc(1, 10));

	name_ptr("P", q);
	q[10] = 0x5a;
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

/* Android's verify_pointers test: a freed pointer passed to free, malloc_usable_size and realloc. */
int test_verify_pointers(void)
{
	uint8_t *p = opaque(malloc(10));

	name_ptr("P", p);
	memset(p, 0, 10);
	free(p);
	free(p);
	CHECK(malloc_usable_size(p) == 0);
	CHECK(realloc(p, 1000) == NULL);
	return 0;
}

/* A pointer into a block and one that never came from malloc; the block itself stays valid. */
int test_verify_pointers_interior(void)
{
	uint8_t *p = opaque(malloc(100));
	uint64_t local = 0;

	name_ptr("P", p);
	name_ptr("Q", p + 16);
	name_ptr("S", &local);
	memset(p, 0x5a, 100);
	free(opaque(p + 16));
	CHECK(malloc_usable_size(opaque(p + 16)) == 0);
	free(opaque(&local));
	CHECK(all_bytes(p, 0x5a, 100) && malloc_usable_size(p) >= 100);
	p = opaque(realloc(p, 200));
	CHECK(p != NULL && all_bytes(p, 0x5a, 100));
	free(p);
	return 0;
}

/*
 * A copy of a live block's header, front guard and contents elsewhere (with
 * "guard": 32 bytes of header, 32 of front guard): the tag is right, but the
 * header belongs to another address, so the copy is no block at all.
 */
int test_guard_forged_header(void)
{
	uint8_t *p = opaque(malloc(64)), *buf = opaque(malloc(256)), *q;

	memset(p, 0x5a, 64);
	memcpy(buf, p - 64, 64 + 64 + 32);
	q = buf + 64;
	name_ptr("P", q);
	free(opaque(q));
	CHECK(malloc_usable_size(opaque(q)) == 0);
	CHECK(realloc(opaque(q), 128) == NULL);
	CHECK(all_bytes(p, 0x5a, 64) && malloc_usable_size(p) == 64);
	free(p);
	free(buf);
	return 0;
}

/*
 * Each byte of a rear guard of MD_TEST_GUARD bytes, then of the front guard
 * (as many, rounded up to 16), corrupted alone in a block of its own: the
 * guard checks see every byte, whatever the guard's length.
 */
int test_guard_every_byte(void)
{
	const char *g = getenv("MD_TEST_GUARD");
	long n = g != NULL ? atol(g) : 32, front = (n + 15) / 16 * 16;

	for (long k = 0; k < n; k++) {
		uint8_t *p = opaque(malloc(37));

		name_ptr("P", p);
		p[37 + k] ^= 0x01;
		free(p);
	}
	for (long k = 0; k < front; k++) {
		uint8_t *p = opaque(malloc(37));

		name_ptr("P", p);
		p[-1 - k] ^= 0x01;
		free(p);
	}
	return 0;
}

/* fill_on_alloc fills every byte of blocks of 1 to 300 bytes, whatever the size. */
int test_fill_every_size(void)
{
	for (size_t s = 1; s <= 300; s++) {
		uint8_t *p = opaque(malloc(s));

		CHECK(all_bytes(p, 0xeb, s));
		p = opaque(realloc(p, s + 1));
		CHECK(all_bytes(p, 0xeb, s + 1));
		free(p);
	}
	return 0;
}

/* A block realloc moved: the old pointer is no longer known. */
int test_verify_pointers_realloc_moved(void)
{
	uint8_t *p = opaque(malloc(16)), *q;

	name_ptr("P", p);
	memset(p, 0x33, 16);
	q = opaque(realloc(p, 1 << 20));
	CHECK(q != p && all_bytes(q, 0x33, 16));
	free(p);
	free(q);
	return 0;
}

/* A double free whose block free_track later evicts: it must reach glibc only once. */
int test_free_track_double_free_churn(void)
{
	uint8_t *p = opaque(malloc(100));

	name_ptr("P", p);
	memset(p, 0, 100);
	free(p);
	free(p);
	for (int i = 0; i < 300; i++)
		free(opaque(malloc(100)));
	fprintf(stderr, "done\n");
	return 0;
}

/* A correct program using every entry point and glibc's own allocating functions. */
int test_verify_clean(void)
{
	enum { N = 50000 };
	static void *blocks[N];
	static size_t sizes[N];
	unsigned seed = 1;
	char *line = NULL, *s = NULL;
	size_t cap = 0;
	FILE *f;

	for (size_t i = 0; i < N; i++) {
		size_t size = (size_t)(rand_r(&seed) % 500);

		switch (i % 8) {
		case 0:
			blocks[i] = malloc(size);
			break;
		case 1:
			blocks[i] = calloc(1, size);
			break;
		case 2:
			blocks[i] = memalign(64, size);
			break;
		case 3:
			CHECK(posix_memalign(&blocks[i], 32, size) == 0);
			break;
		case 4:
			blocks[i] = aligned_alloc(16, (size + 15) & ~(size_t)15);
			break;
		case 5:
			blocks[i] = realloc(NULL, size);
			break;
		case 6:
			blocks[i] = reallocarray(NULL, size, 2);
			size *= 2;
			break;
		default:
			blocks[i] = i % 16 == 7 ? valloc(size) : pvalloc(size);
			break;
		}
		CHECK(blocks[i] != NULL && malloc_usable_size(blocks[i]) >= size);
		sizes[i] = size;
		memset(blocks[i], (int)(i & 0xff), size);
	}
	for (size_t i = 0; i < N; i += 3) {
		size_t size = sizes[i] * 2 + 1;
		void *q = realloc(blocks[i], size);

		CHECK(q != NULL && all_bytes(q, (int)(i & 0xff), sizes[i]));
		blocks[i] = q;
		sizes[i] = size;
	}
	for (size_t i = N; i-- > 0;) {
		size_t j = (size_t)rand_r(&seed) % (i + 1);
		void *t = blocks[i];

		blocks[i] = blocks[j];
		blocks[j] = t;
	}
	for (size_t i = 0; i < N; i++)
		free(blocks[i]);
	free(NULL);
	CHECK(realloc(malloc(10), 0) == NULL);
	s = strdup("verify_pointers");
	CHECK(s != NULL);
	free(s);
	CHECK(asprintf(&s, "%d blocks", N) > 0);
	free(s);
	f = fopen("/proc/self/status", "r");
	CHECK(f != NULL);
	if (f != NULL) {
		CHECK(getline(&line, &cap, f) > 0);
		fclose(f);
	}
	free(line);
	fprintf(stderr, "clean done\n");
	return 0;
}

/*
 * Eight threads with thousands of live blocks each allocate, check, resize
 * and free, and hand blocks to each other through shared slots, so that a
 * block is often freed by a thread other than the one that allocated it.
 */
enum { SHARED_SLOTS = 256, LIVE_PER_THREAD = 6000 };
static uint8_t *volatile shared_slots[SHARED_SLOTS];

static uint8_t *stamp_alloc(unsigned *seed, size_t *size_out)
{
	size_t size = 8 + (size_t)(rand_r(seed) % 600);
	uint8_t *p;

	switch (rand_r(seed) % 4) {
	case 0:
		p = malloc(size);
		break;
	case 1:
		p = calloc(1, size);
		break;
	case 2:
		p = memalign(64, size);
		break;
	default:
		p = realloc(NULL, size);
		break;
	}
	if (p == NULL)
		return NULL;
	/* The first 8 bytes hold the size, the rest a pattern derived from it. */
	memcpy(p, &size, sizeof(size));
	for (size_t j = 8; j < size; j++)
		p[j] = (uint8_t)(size + j);
	*size_out = size;
	return p;
}

static int stamp_ok(const uint8_t *p)
{
	size_t size;

	memcpy(&size, p, sizeof(size));
	if (size < 8 || size > 1000 || malloc_usable_size((void *)p) < size)
		return 0;
	for (size_t j = 8; j < size; j++)
		if (p[j] != (uint8_t)(size + j))
			return 0;
	return 1;
}

static void *verify_stress_thread(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	uint8_t **live = calloc(LIVE_PER_THREAD, sizeof(*live));
	size_t size;
	int bad = 0;

	if (live == NULL)
		return (void *)1;
	for (int i = 0; i < LIVE_PER_THREAD; i++)
		live[i] = stamp_alloc(&seed, &size);
	for (int iter = 0; iter < 40000; iter++) {
		int i = rand_r(&seed) % LIVE_PER_THREAD;
		uint8_t *p = live[i];

		if (p == NULL || !stamp_ok(p)) {
			bad++;
			continue;
		}
		switch (rand_r(&seed) % 4) {
		case 0: {
			size_t new_size = 8 + (size_t)(rand_r(&seed) % 600);
			uint8_t *q = realloc(p, new_size);

			if (q == NULL) {
				bad++;
				continue;
			}
			memcpy(q, &new_size, sizeof(new_size));
			for (size_t j = 8; j < new_size; j++)
				q[j] = (uint8_t)(new_size + j);
			live[i] = q;
			break;
		}
		case 1:
			/* Hand the block over; free whatever another thread left there. */
			p = __atomic_exchange_n(&shared_slots[rand_r(&seed) % SHARED_SLOTS], p,
						__ATOMIC_ACQ_REL);
			if (p != NULL && !stamp_ok(p))
				bad++;
			free(p);
			live[i] = stamp_alloc(&seed, &size);
			break;
		default:
			free(p);
			live[i] = stamp_alloc(&seed, &size);
			break;
		}
	}
	for (int i = 0; i < LIVE_PER_THREAD; i++)
		free(live[i]);
	free(live);
	return (void *)(uintptr_t)bad;
}

int test_verify_stress(void)
{
	pthread_t t[8];
	void *bad;

	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, verify_stress_thread, (void *)(uintptr_t)(i + 1)) == 0);
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], &bad);
		CHECK(bad == NULL);
	}
	for (int i = 0; i < SHARED_SLOTS; i++) {
		CHECK(shared_slots[i] == NULL || stamp_ok(shared_slots[i]));
		free(shared_slots[i]);
	}
	fprintf(stderr, "stress done\n");
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

/*
 * The control channel's workloads (shim/ctl.c). ctl_pid prints the process
 * id as "pid=N" for run.sh to put PID in its place. ctl_signals sends
 * itself 45 to 49 (SIGRTMAX-19 to SIGRTMAX-15) in turn, each followed by a
 * malloc and a free so that the shim acts on it. ctl_stats does the same
 * with 49 alone. ctl_wait prints "ready" once the shim is set up and waits
 * for a line on standard input, for signals sent from outside.
 */
static void ctl_say_pid(void)
{
	printf("pid=%d\n", (int)getpid());
	fflush(stdout);
}

static void ctl_raise(int sig)
{
	CHECK(kill(getpid(), sig) == 0);
	free(opaque(malloc(10)));
	fprintf(stderr, "raised %d\n", sig);
}

int test_ctl_pid(void)
{
	free(opaque(malloc(10)));
	ctl_say_pid();
	fprintf(stderr, "ran\n");
	return 0;
}

int test_ctl_signals(void)
{
	free(opaque(malloc(10)));
	for (int sig = SIGRTMAX - 19; sig <= SIGRTMAX - 15; sig++)
		ctl_raise(sig);
	return 0;
}

int test_ctl_stats(void)
{
	free(opaque(malloc(10)));
	ctl_raise(SIGRTMAX - 15);
	return 0;
}

int test_ctl_wait(void)
{
	char line[16];

	free(opaque(malloc(10)));
	printf("ready\n");
	fflush(stdout);
	CHECK(fgets(line, sizeof(line), stdin) != NULL);
	free(opaque(malloc(10)));
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
	{ "guard_realloc_shrink", test_guard_realloc_shrink },
	{ "usable_calloc", test_usable_calloc },
	{ "calloc_overrun", test_calloc_overrun },
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
	{ "verify_pointers", test_verify_pointers },
	{ "verify_pointers_interior", test_verify_pointers_interior },
	{ "verify_pointers_realloc_moved", test_verify_pointers_realloc_moved },
	{ "guard_forged_header", test_guard_forged_header },
	{ "guard_every_byte", test_guard_every_byte },
	{ "fill_every_size", test_fill_every_size },
	{ "free_track_double_free_churn", test_free_track_double_free_churn },
	{ "verify_clean", test_verify_clean },
	{ "verify_stress", test_verify_stress },
	{ "ctl_pid", test_ctl_pid },
	{ "ctl_signals", test_ctl_signals },
	{ "ctl_stats", test_ctl_stats },
	{ "ctl_wait", test_ctl_wait },
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
