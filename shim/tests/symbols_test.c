// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Tests of md_symbolize (symbols.c, symfile.c), linked in directly, in a
 * program built without -rdynamic: static functions of the program and of a
 * shared library, a function of size 0, thousands of functions in one
 * library, stripped, deleted and replaced files, the vdso, errno, threads
 * against dlopen and dlclose, fork while other threads hold the cache, and
 * library copies whose section headers, symbol and string tables are
 * corrupted at random (the loader ignores them, the symbolizer must not
 * fault on them). Prints "FAIL: ..." for each failed check and exits 1 if
 * there was one.
 *
 * Usage: symbols_test LIBSYMTEST LIBMANY STRIPPED_LIBSYMTEST|- DIR
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../symbols.h"

static int failures;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                  \
		}                                                                    \
	} while (0)

typedef int (*addrs_fn)(uintptr_t *, uintptr_t *, uintptr_t *);

int main(int argc, char **argv);

static __attribute__((noinline)) int exe_static(int x)
{
	return x * 7 + 1;
}

/* named reports whether pc is named name, at offset pc - start. */
static bool named(uintptr_t pc, const char *name, uintptr_t start)
{
	struct md_sym s;

	if (!md_symbolize(pc, &s)) {
		fprintf(stderr, "  %#lx: no object\n", (unsigned long)pc);
		return false;
	}
	if (!s.named || strcmp(s.name, name) != 0 || s.offset != pc - start) {
		fprintf(stderr, "  %#lx in %s: got %s+%lu, want %s+%lu\n", (unsigned long)pc, s.path,
			s.named ? s.name : "(none)", (unsigned long)s.offset, name,
			(unsigned long)(pc - start));
		return false;
	}
	return true;
}

/* unnamed_or reports whether pc is unnamed or named name. */
static bool unnamed_or(uintptr_t pc, const char *name)
{
	struct md_sym s;

	if (!md_symbolize(pc, &s))
		return false;
	if (s.named && strcmp(s.name, name) != 0) {
		fprintf(stderr, "  %#lx: named %s, want %s or nothing\n", (unsigned long)pc, s.name,
			name);
		return false;
	}
	return true;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fprintf(stderr, "FAIL: reading %s\n", path);
		exit(1);
	}
	buf = malloc((size_t)n);
	if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "FAIL: reading %s\n", path);
		exit(1);
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void write_file(const char *path, const char *buf, size_t len)
{
	FILE *f = fopen(path, "wb");

	if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "FAIL: writing %s\n", path);
		exit(1);
	}
}

static void copy_file(const char *from, const char *to)
{
	size_t len;
	char *buf = read_file(from, &len);

	write_file(to, buf, len);
	free(buf);
}

/* lib_open loads path and finds its static functions. */
static void *lib_open(const char *path, uintptr_t *helper, uintptr_t *corrupt, uintptr_t *nosize)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	addrs_fn addrs;

	if (h == NULL) {
		fprintf(stderr, "FAIL: dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
	addrs = (addrs_fn)dlsym(h, "symlib_addrs");
	if (addrs == NULL) {
		fprintf(stderr, "FAIL: dlsym symlib_addrs in %s\n", path);
		exit(1);
	}
	addrs(helper, corrupt, nosize);
	return h;
}

/* can_open_map_files reports whether this process may open its /proc/self/map_files entries. */
static bool can_open_map_files(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned long start, end;
	char path[64];
	int fd;

	if (f == NULL || fscanf(f, "%lx-%lx", &start, &end) != 2) {
		if (f != NULL)
			fclose(f);
		return false;
	}
	fclose(f);
	snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", start, end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static void test_program(void)
{
	uintptr_t pc = (uintptr_t)exe_static + 4;
	uintptr_t getpid_pc = (uintptr_t)dlsym(RTLD_DEFAULT, "getpid");
	struct md_sym s;

	CHECK(exe_static(1) == 8);
	CHECK(named(pc, "exe_static", (uintptr_t)exe_static));
	CHECK(named((uintptr_t)main + 1, "main", (uintptr_t)main));
	CHECK(named((uintptr_t)test_program + 9, "test_program", (uintptr_t)test_program));
	/* A library function .dynsym names too. */
	CHECK(getpid_pc != 0);
	CHECK(md_symbolize(getpid_pc + 1, &s) && s.named && s.offset == 1 &&
	      strstr(s.name, "getpid") != NULL);
	/* Nothing is mapped at 16. */
	CHECK(!md_symbolize(16, &s) && !s.named);
	/* The vdso has no file: whatever dladdr says, and no fault. */
	if (getauxval(AT_SYSINFO_EHDR) != 0)
		md_symbolize((uintptr_t)getauxval(AT_SYSINFO_EHDR) + 1, &s);
}

static void test_library(const char *lib, const char *many, const char *stripped, const char *dir)
{
	uintptr_t helper, corrupt, nosize;
	char path[4096], tmp[4096];
	const uintptr_t *funcs;
	const int *count;
	bool map_files = can_open_map_files();
	void *h;

	h = lib_open(lib, &helper, &corrupt, &nosize);
	CHECK(named(helper, "lib_static_helper", helper));
	CHECK(named(helper + 3, "lib_static_helper", helper));
	CHECK(named(corrupt + 10, "lib_corrupt", corrupt));
	CHECK(named((uintptr_t)dlsym(h, "symlib_corrupt") + 2, "symlib_corrupt",
		    (uintptr_t)dlsym(h, "symlib_corrupt")));
	/* Size 0: it reaches to the next symbol, so its last instruction is found too. */
	if (nosize != 0) {
		CHECK(named(nosize, "lib_nosize", nosize));
		CHECK(named(nosize + 8, "lib_nosize", nosize));
	}

	/* Thousands of functions: each one's pc finds it. */
	h = dlopen(many, RTLD_NOW | RTLD_LOCAL);
	CHECK(h != NULL);
	if (h != NULL) {
		funcs = dlsym(h, "many_funcs");
		count = dlsym(h, "many_count");
		CHECK(funcs != NULL && count != NULL && *count > 1000);
		for (int i = 0; funcs != NULL && count != NULL && i < *count; i++) {
			char want[32];

			snprintf(want, sizeof(want), "f%d", i);
			if (!named(funcs[i] + 1, want, funcs[i])) {
				failures++;
				break;
			}
		}
	}

	/* Stripped: .dynsym only, so the static functions go unnamed. */
	if (strcmp(stripped, "-") != 0) {
		h = lib_open(stripped, &helper, &corrupt, &nosize);
		CHECK(unnamed_or(helper + 1, "-"));
		CHECK(named((uintptr_t)dlsym(h, "symlib_corrupt") + 2, "symlib_corrupt",
			    (uintptr_t)dlsym(h, "symlib_corrupt")));
	}

	/* Deleted: only /proc/self/map_files still reaches the file. errno is kept. */
	snprintf(path, sizeof(path), "%s/deleted.so", dir);
	copy_file(lib, path);
	lib_open(path, &helper, &corrupt, &nosize);
	CHECK(unlink(path) == 0);
	errno = EDOM;
	if (map_files)
		CHECK(named(helper + 1, "lib_static_helper", helper));
	else
		CHECK(unnamed_or(helper + 1, "lib_static_helper"));
	CHECK(errno == EDOM);

	/* Replaced by another file under the same name: that file's names are not used. */
	snprintf(path, sizeof(path), "%s/replaced.so", dir);
	copy_file(lib, path);
	lib_open(path, &helper, &corrupt, &nosize);
	/* A new file renamed over it: writing the old one would change the loaded image. */
	snprintf(tmp, sizeof(tmp), "%s/replaced.so.new", dir);
	copy_file(many, tmp);
	CHECK(rename(tmp, path) == 0);
	if (map_files)
		CHECK(named(helper + 1, "lib_static_helper", helper));
	else
		CHECK(unnamed_or(helper + 1, "lib_static_helper"));
}

/* ---- corrupted copies ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* interesting returns a value that tends to break bounds checks. */
static uint64_t interesting(uint64_t size)
{
	static const uint64_t v[] = { 0, 1, 2, 7, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000,
				      0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ULL,
				      UINT64_MAX, UINT64_MAX - 1, INT64_MAX };

	switch (rnd() % 4) {
	case 0:
		return size + rnd() % 64 - 32;
	case 1:
		return rnd();
	default:
		return v[rnd() % (sizeof(v) / sizeof(v[0]))];
	}
}

/* put_field writes value's low bytes at off, unless loaded (if not NULL) marks one of them. */
static void put_field(char *buf, size_t len, const bool *loaded, size_t off, size_t width,
		      uint64_t value)
{
	if (off > len || width > len - off)
		return;
	for (size_t i = 0; loaded != NULL && i < width; i++)
		if (loaded[off + i])
			return;
	memcpy(buf + off, &value, width); /* little-endian: the low bytes first */
}

/*
 * mutate corrupts what the loader does not use: section headers, bytes no
 * PT_LOAD segment holds, the ELF header's section fields. Returns the length.
 */
static size_t mutate(char *buf, size_t len, const bool *loaded)
{
	ElfW(Ehdr) eh;
	size_t n = 1 + rnd() % 8;

	memcpy(&eh, buf, sizeof(eh));
	for (size_t k = 0; k < n; k++) {
		switch (rnd() % 6) {
		case 0: { /* a random unloaded byte */
			size_t off = rnd() % len;

			if (!loaded[off])
				buf[off] = (char)rnd();
			break;
		}
		case 1: { /* an ELF header field about sections */
			static const struct {
				size_t off, width;
			} f[] = {
				{ offsetof(ElfW(Ehdr), e_shoff), sizeof(eh.e_shoff) },
				{ offsetof(ElfW(Ehdr), e_shentsize), sizeof(eh.e_shentsize) },
				{ offsetof(ElfW(Ehdr), e_shnum), sizeof(eh.e_shnum) },
				{ offsetof(ElfW(Ehdr), e_shstrndx), sizeof(eh.e_shstrndx) },
			};
			size_t i = rnd() % 4;

			put_field(buf, len, NULL, f[i].off, f[i].width, interesting(len));
			break;
		}
		case 2:
		case 3: { /* a field of a section header */
			size_t i, field;

			if (eh.e_shnum == 0 || eh.e_shoff >= len)
				break;
			i = rnd() % eh.e_shnum;
			field = rnd() % (sizeof(ElfW(Shdr)) / sizeof(uint32_t));
			put_field(buf, len, loaded, eh.e_shoff + i * sizeof(ElfW(Shdr)) + field * 4,
				  rnd() % 2 ? 4 : 8, interesting(len));
			break;
		}
		case 4: { /* a field of a symbol in .symtab */
			for (size_t i = 0; i < eh.e_shnum; i++) {
				ElfW(Shdr) sh;

				if (eh.e_shoff + (i + 1) * sizeof(sh) > len)
					break;
				memcpy(&sh, buf + eh.e_shoff + i * sizeof(sh), sizeof(sh));
				if (sh.sh_type != SHT_SYMTAB || sh.sh_size < sizeof(ElfW(Sym)) ||
				    sh.sh_offset >= len)
					continue;
				size_t s = rnd() % (sh.sh_size / sizeof(ElfW(Sym)));
				size_t field = rnd() % (sizeof(ElfW(Sym)) / sizeof(uint32_t));

				put_field(buf, len, loaded, sh.sh_offset + s * sizeof(ElfW(Sym)) + field * 4, 4,
					  interesting(len));
				break;
			}
			break;
		}
		default: { /* cut the unloaded tail */
			size_t off = rnd() % len;

			if (!loaded[off]) {
				bool tail = true;

				for (size_t j = off; j < len && tail; j++)
					tail = !loaded[j];
				if (tail)
					len = off;
			}
			break;
		}
		}
	}
	return len;
}

static void test_corrupted(const char *lib, const char *dir, int rounds)
{
	size_t len, cut;
	char *orig = read_file(lib, &len), *buf = malloc(len);
	bool *loaded = calloc(len, 1);
	ElfW(Ehdr) eh;
	char path[4096];
	int named_ok = 0;

	memcpy(&eh, orig, sizeof(eh));
	for (size_t i = 0; i < eh.e_phnum; i++) {
		ElfW(Phdr) ph;

		memcpy(&ph, orig + eh.e_phoff + i * sizeof(ph), sizeof(ph));
		if (ph.p_type == PT_LOAD)
			for (size_t j = ph.p_offset; j < ph.p_offset + ph.p_filesz && j < len; j++)
				loaded[j] = true;
	}
	for (int r = 0; r < rounds; r++) {
		uintptr_t helper, corrupt, nosize;
		struct md_sym s;
		void *h;

		memcpy(buf, orig, len);
		cut = mutate(buf, len, loaded);
		snprintf(path, sizeof(path), "%s/corrupt%d.so", dir, r);
		write_file(path, buf, cut);
		h = lib_open(path, &helper, &corrupt, &nosize);
		CHECK(md_symbolize(helper + 1, &s));
		if (s.named && strcmp(s.name, "lib_static_helper") == 0)
			named_ok++;
		CHECK(md_symbolize(corrupt + 1, &s));
		if (nosize != 0)
			CHECK(md_symbolize(nosize + 1, &s));
		dlclose(h);
		unlink(path);
	}
	/* Most mutations leave the symbol table usable. */
	CHECK(named_ok > 0);
	free(orig);
	free(buf);
	free(loaded);
}

/* ---- threads and fork ---- */

static const char *g_lib, *g_dir;
static volatile int g_stop;

static void *hammer(void *arg)
{
	uintptr_t pc = (uintptr_t)exe_static + 2;

	(void)arg;
	while (!g_stop)
		if (!named(pc, "exe_static", (uintptr_t)exe_static)) {
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
			break;
		}
	return NULL;
}

static void *churn(void *arg)
{
	char path[4096];

	(void)arg;
	snprintf(path, sizeof(path), "%s/churn.so", g_dir);
	copy_file(g_lib, path);
	for (int i = 0; i < 200; i++) {
		uintptr_t helper, corrupt, nosize;
		void *h = lib_open(path, &helper, &corrupt, &nosize);

		if (!named(helper + 1, "lib_static_helper", helper))
			__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
		dlclose(h);
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[8], c;
	int forks_ok = 0;

	for (int i = 0; i < 8; i++)
		CHECK(pthread_create(&t[i], NULL, hammer, NULL) == 0);
	/* Libraries loaded and unloaded under the lookups. */
	CHECK(pthread_create(&c, NULL, churn, NULL) == 0);
	pthread_join(c, NULL);
	/*
	 * A child forked while another thread holds the cache lock takes the
	 * lock over. (Not while a thread loads libraries: glibc does not reset
	 * all of its loader locks in the child.)
	 */
	for (int i = 0; i < 40; i++) {
		pid_t pid = fork();
		int st;

		if (pid == 0) {
			uintptr_t pc = (uintptr_t)exe_static + 3;

			alarm(20);
			_exit(named(pc, "exe_static", (uintptr_t)exe_static) ? 0 : 1);
		}
		if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			forks_ok++;
	}
	CHECK(forks_ok == 40);
	g_stop = 1;
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s LIBSYMTEST LIBMANY STRIPPED|- DIR\n", argv[0]);
		return 2;
	}
	g_lib = argv[1];
	g_dir = argv[4];
	test_program();
	test_library(argv[1], argv[2], argv[3], argv[4]);
	test_corrupted(argv[1], argv[4], 300);
	test_threads();
	if (failures != 0)
		return 1;
	printf("symbols ok\n");
	return 0;
}
